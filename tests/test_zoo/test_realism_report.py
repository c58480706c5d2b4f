"""`zoo realism case N` end to end on a small trained entry: the JSON report's keys, the KL table of
natural / Tracr / SIIT / IIT models, the plots, the cache of comparison models, and bad input."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from zoo.cli import main

HEURISTICS = {"output_norm", "output_variance", "weight_norm", "output_weight_norm", "logit_variance"}


@pytest.fixture(scope="module")
def root(compiled, compile_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zoo root with a small SIIT entry of case 33 (a few steps: criterion not needed here) and
    the compiled case already in its compile cache."""
    from siit.config import TrainConfig
    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.train_entry import write_entry_files as _write

    root = tmp_path_factory.mktemp("realism-root")
    cc = compiled("33")
    shutil.copytree(compile_cache / cc.case.entry_name, root / "compiled" / cc.case.entry_name)
    result = train(cc, TrainConfig(seed=0, epochs=2, n_train=256, n_val=96, batch_size=64, eval_every=8))
    _write(root / "entries" / "case-33", cc, result=result, validation=validate_model(result.model, result.evaluator),
           command=None)
    return root


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_realism_json_plots_and_cache(root: Path, tmp_path: Path) -> None:
    entry = root / "entries" / "case-33"
    before = _digest(entry)
    plots = tmp_path / "plots"
    code, out, _ = _run(["realism", "case", "33", "--root", str(root), "--json", "--epochs", "1", "--n", "300",
                         "--plots", str(plots)])
    assert code == 0
    report = json.loads(out)
    assert {"case", "entry", "inputs", "activity", "weight_kl", "comparison_models", "targets", "definitions",
            "plots"} <= set(report)
    assert report["case"] == "33" and report["inputs"]["n"] == 300
    siit, tracr = report["activity"]["siit"], report["activity"]["tracr"]
    assert HEURISTICS <= set(siit["heuristics"]) and HEURISTICS <= set(tracr["heuristics"])
    for h in siit["heuristics"].values():
        assert 0.5 <= h["separation"] <= 1.0 and h["separation"] == max(h["auroc"], 1 - h["auroc"])
    assert [n["node"] for n in siit["nodes"]] == ["a0.h0", "a0.h1", "a0.h2", "a0.h3", "m0",
                                                   "a1.h0", "a1.h1", "a1.h2", "a1.h3", "m1"]
    assert siit["circuit"] == json.loads((entry / "circuit.json").read_text())["nodes"]
    assert siit["in_vs_out"]["output_norm"]["in_circuit"]["n"] == len(siit["circuit"])
    assert siit["in_vs_out"]["output_norm"]["out_of_circuit"]["n"] == 10 - len(siit["circuit"])
    # the compiled model of case 33 is one MLP: size heuristics find it exactly
    assert tracr["circuit"] == ["m0"] and tracr["heuristics"]["weight_norm"]["separation"] == 1.0

    kl = report["weight_kl"]
    assert kl["order"] == ["natural", "tracr", "siit", "iit"]
    assert [len(row) for row in kl["lower_triangle"]] == [4, 4, 4, 4]
    for i, row in enumerate(kl["lower_triangle"]):
        assert row[i] == 0.0 and all(v is None for v in row[i + 1:]) and all(v >= 0 for v in row[: i + 1])
        assert row[:i] == [kl["matrix"][c][i] for c in range(i)]  # cell (r, c) = KL(P_c || P_r)
    assert kl["pairs"]["natural-siit"] == kl["matrix"][0][2]
    assert len(kl["edges"]) == kl["spec"]["bins"] + 1 == 101
    assert {k: sum(v) for k, v in kl["counts"].items()} == kl["n_weights"]
    assert report["targets"]["kl_natural_siit_below_natural_tracr"]["met"] is True  # Tracr: sparse spikes

    for kind in ("natural", "iit"):
        info = report["comparison_models"][kind]
        assert info["from_cache"] is False and info["steps"] == 4  # 1 epoch of 256 / 64
        assert (root / "realism" / "case-33" / kind / "model.safetensors").is_file()
    assert report["comparison_models"]["natural"]["config"]["iit_weight"] == 0.0
    assert report["comparison_models"]["iit"]["config"]["strict_weight"] == 0.0

    names = {"weight_histograms.png", "node_activity_siit.png", "node_activity_tracr.png"}
    assert {Path(p).name for p in report["plots"]} == names
    assert {p.name for p in plots.iterdir()} == names  # no temporary folder left behind
    for name in names:
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _digest(entry) == before  # the SIIT entry is only read

    # a second run reuses the cached comparison models; the text report says so
    code, out, _ = _run(["realism", "case", "33", "--root", str(root), "--epochs", "1", "--n", "300"])
    assert code == 0
    assert "natural: cached, 4 steps" in out and "iit: cached, 4 steps" in out
    assert "weight-histogram KL divergence" in out and "output_variance" in out


def test_no_train_leaves_uncached_kinds_out(root: Path, tmp_path: Path) -> None:
    other = tmp_path / "root"
    shutil.copytree(root / "entries", other / "entries")
    shutil.copytree(root / "compiled", other / "compiled")
    code, out, _ = _run(["realism", "case", "33", "--root", str(other), "--json", "--no-train", "--n", "50"])
    assert code == 0
    report = json.loads(out)
    assert report["weight_kl"]["order"] == ["tracr", "siit"]
    assert report["comparison_models"]["natural"]["missing"] is True
    assert report["targets"]["kl_natural_siit_below_natural_tracr"]["met"] is None
    assert not (other / "realism" / "case-33" / "natural").exists()


def test_comparison_configs_are_the_cli_flags() -> None:
    from siit.config import TrainConfig
    from zoo.realism_report import comparison_config

    siit = TrainConfig(seed=7, epochs=30)
    training = {"config": siit.to_json(), "arch": {"overrides": {"min_d_head": 4, "act_fn": "gelu"}}}
    natural, arch = comparison_config(training, "natural", None)
    assert natural == TrainConfig(seed=7, epochs=30, iit_weight=0.0, strict_weight=0.0)  # zoo train --natural
    assert not natural.distractors and not natural.rescale_heads and arch.min_d_head == 4
    iit, _ = comparison_config(training, "iit", 3)
    assert iit == TrainConfig(seed=7, epochs=3, strict_weight=0.0)  # zoo train --strict-weight 0
    assert iit.iit_weight == 1.0 and not iit.distractors


@pytest.mark.parametrize("argv, needle", [
    (["realism", "case", "33"], "no trained entry for case 33"),
    (["realism", "case", "999"], "999"),
    (["realism", "planted", "ioi"], "no trained entry for planted ioi"),
    (["realism", "planted", "nope"], "nope"),
    (["realism", "case", "33", "--n", "1"], "--n must be at least 2"),
    (["realism", "case", "33", "--no-train", "--retrain"], "contradict"),
    (["realism", "case", "33", "--epochs", "0"], "--epochs"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], needle: str, tmp_path: Path) -> None:
    code, out, err = _run([*argv, "--root", str(tmp_path / "empty")])
    assert code == 2 and out == ""
    assert err.startswith("zoo: error: ") and err.count("\n") == 1 and needle in err, err
