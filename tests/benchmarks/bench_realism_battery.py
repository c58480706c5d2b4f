"""The battery of no-intervention looks (eval.core.looks, issue 32) on trained entries: for each entry
of a zoo root, every look's separation max(AUROC, 1 - AUROC) and its chance band on `zoo realism`'s
inputs (2000 sampler inputs, seed 0), then per look the median over entries, how many entries exceed
0.75 (0.85 for the looks reported apart) and how many exceed their own chance band.

    python tests/benchmarks/bench_realism_battery.py --root ROOT [--cases 3,4,...] [--planted ioi,...]

Reads entries only (train them first: `zoo train --all --root ROOT`, `zoo train planted NAME --root
ROOT`); not part of CI. The numbers go into issue 32's note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

MAIN_CASES = "3,4,8,11,13,18,19,20,21,26,29,33,34,35,36,37"


def entry_battery(root: Path, kind: str, ident: str, n: int, seed: int) -> dict:
    """One entry's battery on n sampler inputs."""
    import torch

    from eval.core.looks import battery
    from siit.look_inputs import look_inputs
    from siit.transformer import Transformer
    from zoo.high_level_source import resolve_case
    from zoo.realism_report import load_siit_entry

    torch.set_num_threads(1)
    case = resolve_case(kind, ident)
    entry = load_siit_entry(root / "entries" / case.entry_name, case)
    tokens, mask = entry.encoding.encode(case.sample(n, seed))
    model = Transformer.from_state_dict(entry.config, entry.state_dict)
    start = time.perf_counter()
    report = battery(look_inputs(model, tokens, mask, entry.circuit.nodes, case.task_kind), with_values=False)
    return {"entry": case.entry_name, "seconds": round(time.perf_counter() - start, 3),
            "nodes": model.n_layers * (model.n_heads + 1),
            "circuit": sorted(entry.circuit.nodes), "max_separation": report["max_separation"],
            "median_separation": report["median_separation"], "max_separation_apart": report["max_separation_apart"],
            "met": report["met"], "over_bound": report["over_bound"],
            "looks": {k: {"separation": r["separation"], "chance_95": r["chance_95"], "p": r["p"], "apart": r["apart"]}
                      for k, r in report["looks"].items()}}


def summarise(rows: list[dict]) -> dict:
    """Per look over entries: median separation, entries over the bound, entries over their chance band."""
    out = {}
    for key in rows[0]["looks"]:
        cells = [r["looks"][key] for r in rows if r["looks"][key]["separation"] is not None]
        seps = [c["separation"] for c in cells]
        bound = 0.85 if cells and cells[0]["apart"] else 0.75
        out[key] = {"median": round(statistics.median(seps), 3) if seps else None, "entries": len(seps),
                    "over_bound": sum(s > bound for s in seps), "bound": bound,
                    "over_chance_95": sum(c["separation"] > c["chance_95"] for c in cells)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="zoo root holding the trained entries")
    ap.add_argument("--cases", default=MAIN_CASES, help="case ids (default: the 16 main cases; '' for none)")
    ap.add_argument("--planted", default="", help="planted model names, comma-separated")
    ap.add_argument("--n", type=int, default=2000, help="sampler inputs per entry (zoo realism's default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    targets = [("case", c) for c in args.cases.split(",") if c] + [("planted", p) for p in args.planted.split(",") if p]
    rows = []
    for kind, ident in targets:
        rows.append(entry_battery(args.root, kind, ident, args.n, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    if rows:
        print(json.dumps({"summary": summarise(rows), "entries": len(rows),
                          "met": sum(r["met"] for r in rows)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
