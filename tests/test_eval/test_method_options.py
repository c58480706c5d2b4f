"""Method options from the command line (issue 10: "steps configurable", "the metric and τ grid are
options"): `--method-option METHOD.FIELD=VALUE` for `zoo eval` and `zoo bench`, read by the field's
type, checked where the options are made, bound so that the method runs, is cached and is recorded
with them. Runs on the compiled case 3 (cached for the session by the `compiled` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformer_lens")

from eval.methods.acdc import AcdcOptions  # noqa: E402
from eval.methods.registry import REGISTRY  # noqa: E402
from eval.leaderboard.cells import bench_method  # noqa: E402
from eval.leaderboard.fingerprints import method_fingerprint  # noqa: E402
from eval.methods.edge_patching import IGOptions, PatchingOptions  # noqa: E402
from eval.methods.ensemble import EnsembleOptions  # noqa: E402
from eval.methods.options import options_of, parse_method_options, with_options  # noqa: E402
from eval.methods.interface import MethodError, call_method  # noqa: E402
from eval.methods.subnetwork_probing import SPOptions  # noqa: E402


def test_option_text_is_read_by_the_field_type():
    acdc = with_options(REGISTRY["acdc"], {"taus": " 0, 0.01,0.1", "metric": "logit_diff"})
    assert options_of(acdc) == AcdcOptions(taus=(0.0, 0.01, 0.1), metric="logit_diff")
    assert options_of(with_options(REGISTRY["eap_ig_inputs"], {"steps": "10"})) == IGOptions(steps=10)
    sp = options_of(with_options(REGISTRY["edge_sp"], {"penalties": "0,1,10", "lr": "0.05"}))
    assert (sp.penalties, sp.lr, sp.steps) == ((0.0, 1.0, 10.0), 0.05, SPOptions().steps)
    assert options_of(with_options(REGISTRY["ensemble"], {"methods": "eap,ifr"})).methods == ("eap", "ifr")
    assert options_of(with_options(REGISTRY["acdc"], {"taus": (0.5,)})).taus == (0.5,)  # typed values as given
    assert options_of(REGISTRY["acdc"]) == AcdcOptions() and options_of(REGISTRY["eap"]) is None
    # binding twice keeps the last value of each field and the earlier ones of the others
    twice = with_options(with_options(REGISTRY["acdc"], {"metric": "logit_diff"}), {"taus": "1"})
    assert options_of(twice) == AcdcOptions(taus=(1.0,), metric="logit_diff")
    assert parse_method_options(["acdc.taus=0,0.1", "eap_ig_inputs.steps=3", "pkg.mod:f.scale=2"]) == {
        "acdc": {"taus": "0,0.1"}, "eap_ig_inputs": {"steps": "3"}, "pkg.mod:f": {"scale": "2"}}
    with pytest.raises(MethodError, match="names acdc, which no --method runs"):
        parse_method_options(["acdc.taus=1"], running=["eap"])


@pytest.mark.parametrize(("items", "needle"), [
    (["acdc"], "must be METHOD.FIELD=VALUE"),
    (["acdc.=1"], "must be METHOD.FIELD=VALUE"),
    (["acdc.taus=1", "acdc.taus=2"], "acdc.taus is given twice"),
    (["acdc.tau=1"], "has no option 'tau'; its options: taus, metric, max_rows"),
    (["eap.steps=3"], "method 'eap' takes no options"),
    (["acdc.metric=kl"], "acdc.metric must be one of divergence, logit_diff, got 'kl'"),
    (["acdc.taus=0,inf"], "acdc.taus must be a finite number, got 'inf'"),
    (["acdc.taus=0,x"], "acdc.taus must be a finite number, got 'x'"),
    (["acdc.max_rows=2.5"], "acdc.max_rows must be an integer"),
    (["acdc.taus="], "at least one threshold"),
    (["acdc.taus=-1"], "thresholds must be >= 0"),
    (["eap_ig_inputs.steps=0"], "steps must be >= 1"),
    (["node_sp.init_keep=1"], "init_keep in (0, 1)"),
    (["ensemble.methods=eap,nope"], "ensemble methods must be"),
])
def test_bad_method_options_are_one_line_errors(items, needle):
    with pytest.raises(MethodError) as exc:
        for key, fields in parse_method_options(items).items():
            with_options(REGISTRY[key], fields)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_options_are_checked_when_they_are_made():
    for make in (lambda: AcdcOptions(taus=()), lambda: AcdcOptions(metric="kl"), lambda: IGOptions(steps=0),
                 lambda: PatchingOptions(max_rows=0), lambda: SPOptions(penalties=(-1.0,)),
                 lambda: SPOptions(batch=0), lambda: EnsembleOptions(methods=("nope",))):
        with pytest.raises(ValueError):
            make()


@pytest.fixture
def case3(compiled):
    from zoo.targets import resolve_target

    return resolve_target(compiled("3"), "compiled")


def test_a_bound_method_runs_with_its_options_and_is_cached_apart(case3):
    from eval.core.graph import graph_of
    from eval.patching.task import make_task

    task = make_task(case=case3.case, encoding=case3.encoding, reference=case3.reference, n=16, seed=0)
    bound = with_options(REGISTRY["acdc"], {"taus": "0,0.1"})
    out = call_method(bound, case3.model, task, graph=graph_of(case3.model), seed=0, ablation="resample")
    assert [c.param for c in out.circuits] == [0.0, 0.1]
    assert bound.key == "acdc" and method_fingerprint(bound) != method_fingerprint(REGISTRY["acdc"])
    cell = bench_method("acdc", REGISTRY, {"taus": "0,0.1", "metric": "logit_diff"})
    assert cell.key == "acdc[taus=0,0.1;metric=logit_diff]"
    assert cell.fingerprint != bench_method("acdc", REGISTRY, {"taus": "0,0.1"}).fingerprint


@pytest.fixture
def cli_root(compiled_root) -> Path:
    return compiled_root("3")


def test_cli_eval_runs_and_records_method_options(cli_root, zoo_cli):
    argv = ["eval", "case", "3", "--model", "compiled", "--root", str(cli_root), "--method", "acdc", "--method",
            "eap_ig_inputs", "--method-option", "acdc.taus=0,0.1", "--method-option", "eap_ig_inputs.steps=2",
            "--n", "16", "--stability-seeds", "1", "--permutations", "5", "--json"]
    code, out, err = zoo_cli(argv)
    assert code == 0, err
    report = json.loads(out)
    assert report["settings"]["method_options"] == {
        "acdc": {"taus": [0.0, 0.1], "metric": "divergence", "max_rows": AcdcOptions().max_rows},
        "eap_ig_inputs": {"steps": 2, "max_rows": IGOptions().max_rows}}
    acdc = next(m for m in report["methods"] if m["key"] == "acdc")
    assert [c["param"] for c in acdc["circuits"]] == [0.0, 0.1]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--method", "eap", "--method-option", "acdc.taus=1"], "--method-option names acdc, which no --method runs"),
    (["--method", "acdc", "--method-option", "acdc.metric=kl"], "acdc.metric must be one of"),
    (["--method", "random", "--method-option", "random.x=1"], "method 'random' takes no options"),
])
def test_cli_bad_method_options_one_line_exit_2(cli_root, zoo_cli, argv, needle):
    for command in (["eval", "case", "3", "--model", "compiled"], ["bench", "--cases", "3", "--model", "compiled"]):
        code, out, err = zoo_cli([*command, "--root", str(cli_root), *argv])
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("zoo: error: ") and needle in err, err


def test_cli_bench_keeps_optioned_and_default_cells_apart(cli_root, tmp_path, zoo_cli):
    base = ["bench", "--cases", "3", "--model", "compiled", "--root", str(cli_root), "--out", str(tmp_path / "b"),
            "--n", "16", "--json", "--method", "acdc"]
    option = ["--method-option", "acdc.taus=0,0.1"]
    for argv, computed, key in ((option, 1, "acdc[taus=0,0.1]"), ([], 1, "acdc"), (option, 0, "acdc[taus=0,0.1]")):
        code, out, err = zoo_cli([*base, *argv])
        assert code == 0, err
        board = json.loads(out)
        assert (board["computed"], [r["method"] for r in board["rows"]]) == (computed, [key])
