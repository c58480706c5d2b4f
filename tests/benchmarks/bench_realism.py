"""Realism of trained entries: train cases with the default TrainConfig, validate, and print one
JSON row per case (criterion, time, largest out-of-circuit effects per input shape, the three
non-interventional heuristics' AUROC separation and the variance-floor ratio on 2000 sampler inputs
as `zoo realism` measures them (the issue's protocol), the same on validation.json's inputs,
distractor R²).

    python tests/benchmarks/bench_realism.py --cases 33,3,11 [--seeds 0,1] [--root DIR]

Not part of CI (it trains models); the numbers go into the realism issue's note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

MAIN_CASES = "3,4,8,11,13,18,19,20,21,26,29,33,34,35,36,37"
ZOO_REALISM_N = 2000
"""Inputs `zoo realism` ranks nodes on (its default --n; the issue's 2000 random inputs)."""


def run_case(case_id: str, seed: int, root: Path, overrides: dict) -> dict:
    import torch

    from eval.core.metrics import roc
    from rasp_programs.lookup import get_case
    from rasp_programs.compile import compile_case
    from siit.config import TrainConfig
    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.realism_report import node_activity

    torch.set_num_threads(1)
    compiled = compile_case(get_case(case_id), root / "compiled")
    start = time.perf_counter()
    result = train(compiled, TrainConfig(seed=seed, **overrides))
    train_s = time.perf_counter() - start
    v = validate_model(result.model, result.evaluator)
    r = v["realism"]
    m = result.metrics
    # The issue's protocol (`zoo realism`): ZOO_REALISM_N sampler inputs, seed 0. validation.json's
    # section ranks the same nodes on the n_val padded validation inputs; near the bound the two
    # can differ by a rank pair (case 18: 0.714 there, 0.762 here).
    issue = node_activity(result.low_config, result.model.state_dict(),
                          compiled.encoding.encode(compiled.case.sample(ZOO_REALISM_N, 0)),
                          sorted(result.correspondence.aligned), compiled.case.task_kind)
    return {
        "case": case_id, "seed": seed, "met": result.met_criterion, "steps": result.steps,
        "train_s": round(train_s, 2), "accuracy": m["accuracy"], "iia_min": m["iia_min"], "siia_min": m["siia_min"],
        "distractor_r2_min": m.get("distractor_r2_min"),
        "adaptations": [f"{a['action']}@{a['step']}" for a in result.adaptation.actions],
        "max_out_effect": v["max_out_of_circuit_effect"],
        "max_out_effect_by_shape": v["max_out_of_circuit_effect_by_shape"],
        "min_in_resample": v["min_in_circuit_resample_effect"],
        "patching_auroc": roc({n["node"]: n["resample"] for n in v["node_effects"]},
                              {n["node"] for n in v["node_effects"] if n["in_circuit"]}).auroc,
        "separation": {k: round(x["separation"], 3) for k, x in issue["heuristics"].items()},
        "max_separation": round(issue["max_separation"], 3),
        "variance_floor_ratio": round(issue["variance_floor_ratio"], 3),
        "validation_separation": {k: round(x["separation"], 3) for k, x in r["heuristics"].items()},
        "validation_max_separation": round(r["max_separation"], 3),
        "validation_variance_floor_ratio": round(r["variance_floor_ratio"], 3),
        "circuit": [n["node"] for n in r["nodes"] if n["in_circuit"]],
        "norms": {n["node"]: [round(n["output_norm"], 2), round(n["output_variance"], 2), round(n["weight_norm"], 2)]
                  for n in r["nodes"]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="33,3,11", help=f"comma-separated case ids (all main: {MAIN_CASES})")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--root", help="zoo root for the compile cache (default: a temporary directory)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                    help="TrainConfig override, e.g. --set distractors=false")
    args = ap.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="zoo-realism-"))
    rows = []
    for case_id in args.cases.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            row = run_case(case_id, seed, root, overrides)
            rows.append(row)
            print(json.dumps(row), flush=True)
    seps = [r["max_separation"] for r in rows]
    print(json.dumps({"summary": {
        "runs": len(rows), "met": sum(r["met"] for r in rows),
        "max_separation_max": max(seps), "max_separation_median": statistics.median(seps),
        "separation_median_per_heuristic": {h: statistics.median(r["separation"][h] for r in rows)
                                            for h in rows[0]["separation"]},
        "variance_floor_min": min(r["variance_floor_ratio"] for r in rows),
        "max_out_resample": max(r["max_out_effect"]["resample"] for r in rows),
        "max_out_mean": max(r["max_out_effect"]["mean"] for r in rows),
        "train_s_total": round(sum(r["train_s"] for r in rows), 1),
    }}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
