"""`zoo generate` and generated cases: a name alone rebuilds the same program and weights (also in
another process, where str hashes differ), every kept case equals rasp.evaluate on inputs drawn by
hypothesis, bad or rejected names are one-line errors, and the verbs take `gen-` names."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rasp_programs.case import CaseError
from rasp_programs.lookup import get_case
from rasp_programs.generate import GeneratorConfig, case_name, generated_case, parse_name
from rasp_programs.generate_check import REJECT_REASONS, check_name, generate, reject_counts
from rasp_programs.quick_compile import quick_compile
from zoo.cli import main

KEPT_SEED, KEPT_COUNT = 0, 4


DIGEST = """
import hashlib, sys
from rasp_programs.generate import generated_case
from rasp_programs.quick_compile import quick_compile
sd = quick_compile(generated_case(sys.argv[1])).state_dict
h = hashlib.sha256()
for key in sorted(sd):
    h.update(key.encode())
    h.update(sd[key].numpy().tobytes())
print(h.hexdigest())
"""


@pytest.fixture(scope="module")
def verdicts() -> list:
    drawn = generate(GeneratorConfig(), KEPT_SEED, KEPT_COUNT)
    kept = [v for v in drawn if v.kept]
    assert len(kept) == KEPT_COUNT, reject_counts(drawn)
    return kept


@pytest.fixture(scope="module")
def kept(verdicts) -> list[str]:
    return [v.name for v in verdicts]


def _digest(name: str, hash_seed: str) -> str:
    """sha256 of the weights quick_compile builds for `name` in a fresh process."""
    out = subprocess.run([sys.executable, "-c", DIGEST, name], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONHASHSEED=hash_seed))
    return out.stdout.strip().splitlines()[-1]


def test_names_round_trip_and_only_non_default_settings_appear():
    assert case_name(0, 3) == "gen-0-3"
    config = GeneratorConfig(layers=(3, 4), vocab_size=6, tokens="digits", output="regression")
    name = case_name(7, 12, config)
    assert name == "gen-7-12.L3-4.V6.Td.Or"
    assert parse_name(name) == (7, 12, config)
    mix = GeneratorConfig(mix=(1, 0, 2, 3, 0, 0), seq_len=(2, 6), width=3)
    assert parse_name(case_name(1, 2, mix)) == (1, 2, mix)


@pytest.mark.parametrize("bad,needle", [
    ("gen-0", "expected gen-SEED-INDEX"), ("gen-a-1", "expected"), ("gen-01-1", "expected"),
    ("gen-0-1.X3", "unknown code"), ("gen-0-1.L2-4", "not canonical"), ("gen-0-1.V6.L3-4", "not canonical"),
    ("gen-0-1.L9-9", "layers"), ("gen-0-1.V1", "vocab_size"), ("gen-0-1.V6.V6", "repeated"),
    ("gen-0-1.M300000", "attention head"),
])
def test_bad_names_are_one_line_errors(bad, needle):
    with pytest.raises(CaseError) as exc:
        get_case(bad)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_rejected_draw_is_refused_with_its_reason():
    verdict = next(v for v in map(check_name, (f"gen-0-{i}" for i in range(40))) if not v.kept)
    assert verdict.reason in REJECT_REASONS and verdict.detail
    with pytest.raises(CaseError, match=f"{verdict.name} is not kept \\({verdict.reason}:") as exc:
        get_case(verdict.name)
    assert "\n" not in str(exc.value)


def test_a_name_reproduces_the_same_program_and_weights(kept):
    name = kept[0]
    a, b = generated_case(name), get_case(name)
    assert a.metadata() == b.metadata()
    seqs = a.sample(64, seed=5)
    pa, pb = a.program, b.program
    from tracr.rasp import rasp

    assert [rasp.evaluate(pa, list(s)) for s in seqs] == [rasp.evaluate(pb, list(s)) for s in seqs]
    sd = quick_compile(a).state_dict
    h = hashlib.sha256()
    for key in sorted(sd):
        h.update(key.encode())
        h.update(sd[key].numpy().tobytes())
    assert _digest(name, "12345") == h.hexdigest(), "another process (other str hashes) built other weights"


def test_cli_compile_and_show_take_a_generated_name_with_quick_compile_weights(kept, capsys, _isolated_zoo_home):
    from rasp_programs.compile import compile_case

    assert main(["compile", "case", kept[0], "--json"]) == 0  # Tracr with haiku, cached in the root
    assert json.loads(capsys.readouterr().out)["id"] == kept[0]
    reference = compile_case(get_case(kept[0]), _isolated_zoo_home / "compiled")
    assert reference.from_cache
    quick = quick_compile(generated_case(kept[0]))
    assert quick.config == reference.config and quick.residual_labels == reference.residual_labels
    assert quick.graph == reference.graph and quick.encoding == reference.encoding
    assert reference.state_dict.keys() == quick.state_dict.keys()
    for key, value in reference.state_dict.items():
        assert torch.equal(value, quick.state_dict[key]), key
    assert main(["show", "case", kept[0], "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["case"]["id"] == kept[0] and info["compiled"]["from_cache"]
    assert info["graph"]["nodes"] == list(quick.graph.nodes)
    assert main(["show", "case", "gen-0-1.L2-4"]) == 2
    assert "not canonical" in capsys.readouterr().err


def test_every_kept_case_equals_rasp_evaluate(kept):
    from tracr.rasp import rasp

    for name in kept:
        compiled = quick_compile(generated_case(name))
        case, program = compiled.case, compiled.case.program

        @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(st.sampled_from(case.vocab), min_size=case.min_seq_len, max_size=case.max_seq_len))
        def check(seq):
            expected = rasp.evaluate(program, seq)
            got = compiled.run([tuple(seq)])[0]  # TransformerLens: not the model the generator checked with
            if case.task_kind == "regression":
                assert all(abs(g - e) < 1e-4 for g, e in zip(got, expected)), (name, seq, got, expected)
            else:
                assert got == list(expected), (name, seq, got, expected)

        check()


def test_kept_cases_have_heads_and_out_of_circuit_nodes(verdicts):
    for verdict in verdicts:
        graph = quick_compile(generated_case(verdict.name)).graph
        assert 2 <= verdict.shape["layers"] <= 4 and verdict.shape["heads"] <= GeneratorConfig().width
        assert len(graph.nodes) == verdict.shape["nodes"] < verdict.shape["components"]
        assert any(n.startswith("a") for n in graph.nodes)


def test_cli_generate_json_and_bad_options(capsys):
    assert main(["generate", "--count", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["kept"]) == 2 and report["kept"][0].startswith("gen-0-")
    assert set(report["rejects"]) >= {"mismatch", "inert_node", "whole_model", "no_program"}
    assert 0 < report["kept_share"] <= 1
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--layers", "x"])
    assert exc.value.code == 2
    assert main(["generate", "--layers", "4-2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("zoo: error: layers") and len(err) == 2


def test_an_entry_case_json_with_a_generated_id_rebuilds_the_program(kept):
    from zoo.artifact import ArtifactError
    from zoo.case_json import case_from_json, is_data_only

    data = generated_case(kept[0]).metadata()
    case = case_from_json(data, entry=f"case-{kept[0]}")
    assert not is_data_only(case) and case.metadata() == data
    with pytest.raises(ArtifactError, match="vocab differs"):
        case_from_json({**data, "vocab": ["x", "y"]}, entry=f"case-{kept[0]}")
    with pytest.raises(ArtifactError, match="bad generated case name"):
        case_from_json({**data, "id": "gen-x"}, entry="case-gen-x")


def test_the_zoo_count_counts_a_program_once_whatever_its_names(tmp_path, capsys):
    """tests/benchmarks/bench_zoo_count.py (issue 12's count): `gen-0-1.L2-3` is the draw `gen-0-1`
    (settings steer one stream), so the two count once; a case met in any root counts as met."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks", "bench_zoo_count.py")
    spec = importlib.util.spec_from_file_location("bench_zoo_count", path)
    count = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(count)

    def entry(root: str, case_id: str, met: bool) -> None:
        folder = tmp_path / root / "entries" / f"case-{case_id}"
        folder.mkdir(parents=True)
        (folder / "case.json").write_text(json.dumps({"id": case_id}))
        (folder / "training.json").write_text(json.dumps(
            {"met_criterion": met, "steps": 1, "config": {"n_train": 2048, "epochs": 250}}))

    for case_id, met in [("gen-0-1", True), ("gen-0-1.L2-3", True), ("gen-0-6", True), ("3", True), ("4", False)]:
        entry("a", case_id, met)
    entry("b", "4", True)  # met in another root (other options)
    assert count.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["generated_duplicates"] == [["gen-0-1", "gen-0-1.L2-3"]]
    assert report["generated_distinct_programs_met"] == 2
    assert report["families"]["builtin"] == {"entries": 2, "met": 2}
    assert report["verified_trained_entries"] == 4 and report["not_met"] == []
