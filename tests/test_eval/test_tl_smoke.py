"""The smoke suite CI also runs under the other TransformerLens major (.ci/run, `-m smoke`): for two
entries (a classification and a regression case) a short training run, loading the entry, `zoo
validate`, `zoo eval` with every built-in method, and `zoo bench` on the entry.

With $ZOO_SMOKE_REPORTS set, each run also writes its eval JSON to
$ZOO_SMOKE_REPORTS/tl{major}/case-{id}.json; `python tests/test_eval/test_tl_smoke.py DIR` then checks that
the two majors gave identical AUROCs (training is pure torch and seeded, so both majors evaluate
the same weights).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from eval.methods.registry import REGISTRY
from eval.core.tlens import tl_major
from zoo.cli import main

SMOKE_EVAL = ["--n", "64", "--stability-seeds", "2", "--permutations", "50"]


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.smoke
@pytest.mark.parametrize("case_id", ["33", "3"])
def test_train_load_validate_eval(case_id: str, tmp_path: Path, capsys) -> None:
    root = str(tmp_path / "root")
    code, out, err = _cli(["train", "case", case_id, "--epochs", "1", "--batch-size", "64", "--root", root, "--json"],
                          capsys)
    assert code in (0, 1), err  # 1: a run this short need not meet the criterion, but it writes the entry
    entry_dir = Path(json.loads(out)["entry"])

    from siit.transformer import Transformer
    from zoo.entry import load_entry_dir

    entry = load_entry_dir(entry_dir)
    tokens, mask = entry.encoding.encode(entry.case.sample(16, seed=5))
    with torch.no_grad():
        ours, _ = Transformer.from_state_dict(entry.config, entry.state_dict)(tokens, mask)
        theirs = entry.model(tokens, attention_mask=mask)
    assert type(entry.model).__name__ == ("HookedTransformer" if tl_major() == 3 else "ZooTransformerBridge")
    assert (ours - theirs).abs().max() <= 1e-5  # every position, pads included

    before = json.loads((entry_dir / "validation.json").read_text())
    code, _, err = _cli(["validate", "case", case_id, "--out", str(entry_dir), "--root", root, "--json"], capsys)
    assert code == 0, err
    assert json.loads((entry_dir / "validation.json").read_text())["node_effects"] == before["node_effects"]

    methods = [arg for key in REGISTRY for arg in ("--method", key)]
    code, out, err = _cli(["eval", "case", case_id, "--root", root, *methods, *SMOKE_EVAL, "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["entry"]["model"] == "trained"
    assert [m["key"] for m in report["methods"]] == list(REGISTRY)
    for m in report["methods"]:
        assert math.isfinite(m["node"]["auroc"]) and math.isfinite(m["edge"]["auroc"]), m["key"]
    assert report["methods"][1]["node"]["auroc"] > 0.9  # activation patching finds the circuit
    # zoo bench finds the trained entry in the root and scores it through the same interface
    code, out, err = _cli(["bench", "--root", root, "--method", "random,eap", "--n", "16", "--json"], capsys)
    assert code == 0, err
    board = json.loads(out)
    assert board["entries"] == [f"case-{case_id}/trained"] and board["computed"] == 2
    eap = next(c for c in board["cells"] if c["method"] == "eap")
    assert eap["status"] == "ok" and math.isfinite(eap["edge_auroc"])
    reports = os.environ.get("ZOO_SMOKE_REPORTS")
    if reports:
        dest = Path(reports) / f"tl{tl_major()}"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"case-{case_id}.json").write_text(json.dumps(report))


def compare(root: Path) -> list[str]:
    """Differences between the majors' smoke reports under `root` (tl3/, tl4/); [] if none."""
    majors = sorted(p for p in root.iterdir() if p.is_dir())
    if len(majors) != 2:
        return [f"expected reports of two majors under {root}, found {[p.name for p in majors]}"]
    a, b = majors
    names = sorted(p.name for p in a.glob("*.json"))
    problems = [] if names and names == sorted(p.name for p in b.glob("*.json")) else [
        f"{a.name} has {names}, {b.name} has {sorted(p.name for p in b.glob('*.json'))}"]
    for name in names:
        ra, rb = (json.loads((d / name).read_text()) for d in (a, b))
        for ma, mb in zip(ra["methods"], rb["methods"], strict=True):
            for level in ("node", "edge"):
                if ma[level]["auroc"] != mb[level]["auroc"]:
                    problems.append(f"{name} {ma['key']} {level} AUROC: {a.name} {ma[level]['auroc']} "
                                    f"!= {b.name} {mb[level]['auroc']}")
    return problems


if __name__ == "__main__":
    found = compare(Path(sys.argv[1]))
    print("\n".join(found) or f"smoke reports agree across majors: {sorted(p.name for p in Path(sys.argv[1]).iterdir())}")
    sys.exit(1 if found else 0)
