"""CAUSAL-BENCH Tables 1 and 2 with the real built-in methods on the real weights of the trained
planted entries (`zoo train planted causal-bench-LxH`), beside the paper's simulated numbers.

    python tests/benchmarks/bench_causal_bench_tables.py --root DIR [--sizes 2x2,4x4] [--n 200]
        [--stability-seeds 10] [--markdown]

For every causal-bench entry under the root (sizes that are not trained are listed as missing):
`zoo eval` with the paper's four methods (activation_patching = AP, gradient_attribution = GA,
ablation_scan = AS, greedy = CD), K stability seeds (the paper's K = 10), B = 1000 permutations.
Prints one JSON object: per size and method |S|, F, C, M, Stab., COS, F1, composite, with the
paper's row where it has one (Table 1: 4L/4H; Table 2: F1 at every size), the convergence z, and
seconds. Not part of CI (it evaluates trained models).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

METHODS = {"AP": "activation_patching", "GA": "gradient_attribution", "AS": "ablation_scan", "CD": "greedy"}
"""The paper's four localization methods (§2.3) -> our built-in keys."""
PAPER_TABLE_1 = {  # 4L/4H: |S|, F, C, M, Stab., COS, F1, composite (as printed)
    "AP": (7, 1.000, 0.992, 0.650, 0.417, 0.571, 0.833, 0.650),
    "GA": (10, 1.000, 0.977, 0.500, 0.533, 0.400, 0.667, 0.595),
    "AS": (16, 1.000, 0.980, 0.200, 0.505, 0.250, 0.476, 0.385),
    "CD": (4, 0.978, 0.899, 0.800, 1.000, 1.000, 0.889, 0.929),
}
TABLE_1_FIELDS = ("size", "F", "C", "M", "S", "COS", "F1", "composite")
PAPER_TABLE_2 = {  # F1 per scale: AP, GA, AS, CD (as printed)
    "2x2": (0.600, 0.600, 0.600, 0.750), "4x4": (0.833, 0.667, 0.476, 0.889),
    "6x6": (0.333, 0.455, 0.444, 0.889), "8x8": (0.213, 0.286, 0.189, 0.889),
    "10x10": (0.133, 0.250, 0.179, 0.889), "12x12": (0.071, 0.175, 0.111, 0.889),
}


def evaluate_size(size: str, root: Path, n: int, stability_seeds: int) -> dict:
    from planted import get_planted
    from zoo.targets import evaluate

    start = time.perf_counter()
    case = get_planted(f"causal-bench-{size}").case
    report = evaluate(case, list(METHODS.values()), root=root, model="trained", n=n,
                      stability_seeds=stability_seeds).to_json()
    rows = {}
    for short, key in METHODS.items():
        m = next(r for r in report["methods"] if r["key"] == key)
        cb, node = m["causal_bench"], m["node"]
        ours = {"size": len(cb["identified"]), "F": cb["faithfulness"], "C": cb["completeness"],
                "M": cb["minimality"], "S": cb["stability"], "COS": cb["causal_optimality"],
                "F1": node["at_threshold"]["f1"], "composite": cb["composite"], "cos_vacuous": cb["cos_vacuous"],
                "identified": cb["identified"], "seconds": m.get("seconds")}
        row = {"ours": ours}
        if size == "4x4":
            row["paper_table_1"] = dict(zip(TABLE_1_FIELDS, PAPER_TABLE_1[short]))
        if size in PAPER_TABLE_2:
            row["paper_table_2_f1"] = PAPER_TABLE_2[size][list(METHODS).index(short)]
        rows[short] = row
    conv = report.get("convergence") or {}
    return {"size": size, "components": report.get("graph", {}).get("components"), "methods": rows,
            "convergence_z": conv.get("z"), "convergence_p": conv.get("p"), "convergence_p_paper": conv.get("p_paper"),
            "seconds": round(time.perf_counter() - start, 1)}


def markdown(results: list[dict]) -> str:
    lines = ["| size | method | ours F1 | paper F1 | ours composite | |S| | F | C | M | S | COS |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "missing" in r:
            lines.append(f"| {r['size']} | (not trained) | | | | | | | | | |")
            continue
        for short, row in r["methods"].items():
            o = row["ours"]
            paper = row.get("paper_table_2_f1")
            lines.append(f"| {r['size']} | {short} | {o['F1']:.3f} | {'' if paper is None else f'{paper:.3f}'} | "
                         f"{o['composite']:.3f} | {o['size']} | {o['F']:.3f} | {o['C']:.3f} | {o['M']:.3f} | "
                         f"{o['S']:.3f} | {o['COS']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="zoo root holding planted-causal-bench-* entries")
    ap.add_argument("--sizes", default=",".join(PAPER_TABLE_2), help="comma-separated sizes (default: all six)")
    ap.add_argument("--n", type=int, default=200, help="inputs per run (default 200, `zoo eval`'s)")
    ap.add_argument("--stability-seeds", type=int, default=10, help="K (default 10, the paper's)")
    ap.add_argument("--markdown", action="store_true", help="also print a markdown table on stderr")
    args = ap.parse_args()
    root = Path(args.root)
    results = []
    for size in args.sizes.split(","):
        if not (root / "entries" / f"planted-causal-bench-{size}").is_dir():
            results.append({"size": size, "missing": f"no planted-causal-bench-{size} under {root}/entries"})
            continue
        results.append(evaluate_size(size, root, args.n, args.stability_seeds))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # progress: one line per size
    print(json.dumps({"n": args.n, "stability_seeds": args.stability_seeds, "methods": METHODS,
                      "results": results}, indent=1))
    if args.markdown:
        print(markdown(results), file=sys.stderr)


if __name__ == "__main__":
    main()
