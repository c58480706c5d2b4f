"""Wall time and metrics of built-in methods on compiled cases or trained entries, printed as JSON.

    python tests/benchmarks/bench_eval.py [--cases 3 4 19] [--n 200] [--stability-seeds 10]
        [--model compiled|trained] [--root ROOT] [--methods all | KEY ...]

Each method is evaluated on its own (default settings: K = 10 stability runs, resample
ablation), so `method_s` is the method's K runs and `metrics_s` the scoring (ablations, MIB curve);
`wall_s` also holds what every evaluation does once (task data, anchors, inert ground truth).
A planted model's trained entry: `--cases large-circuit --model trained --root ROOT`.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="+", default=["3", "4", "19", "21"])
    parser.add_argument("--methods", nargs="+", default=["activation_patching", "gradient_attribution",
                                                          "ablation_scan", "greedy", "random"])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--stability-seeds", type=int, default=10)
    parser.add_argument("--root", default=None)
    parser.add_argument("--model", choices=("compiled", "trained"), default="compiled")
    args = parser.parse_args()
    if args.methods == ["all"]:
        from eval.methods.registry import REGISTRY

        args.methods = list(REGISTRY)

    import torch

    torch.set_num_threads(1)
    from zoo.targets import evaluate, resolve_target

    rows = []
    for case in args.cases:
        start = time.perf_counter()
        target = resolve_target(case, args.model, args.root)
        setup = time.perf_counter() - start
        for key in args.methods:
            start = time.perf_counter()
            report = evaluate(target, key, n=args.n,
                              stability_seeds=args.stability_seeds)
            total = time.perf_counter() - start
            m = report.methods[0]
            cb = m.causal_bench
            rows.append({
                "case": case, "method": key, "wall_s": round(total, 3), "method_s": round(m.seconds, 3),
                "metrics_s": round(m.eval_seconds, 3), "compile_or_load_s": round(setup, 3),
                "components": report.graph["components"], "truth_nodes": len(report.ground_truth["nodes"]),
                "node_auroc": m.node.auroc, "edge_auroc": m.edge.auroc, "auroc_kind": m.node.auroc_kind,
                "precision": m.node.at_threshold.precision, "recall": m.node.at_threshold.recall,
                "f1": m.node.at_threshold.f1, "f1_top_k": m.node.at_top_k.f1 if m.node.at_top_k else None,
                "faithfulness": cb.faithfulness, "completeness": cb.completeness, "minimality": cb.minimality,
                "stability": cb.stability, "cos": cb.causal_optimality, "composite": cb.composite,
                "cpr": m.mib.cpr if m.mib else None, "cmd": m.mib.cmd if m.mib else None,
                "identified": list(m.identified),
            })
        del target
    print(json.dumps({"n": args.n, "stability_seeds": args.stability_seeds, "model": args.model, "torch_threads": 1,
                      "rows": rows},
                     indent=1))


if __name__ == "__main__":
    main()
