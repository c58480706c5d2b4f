"""Is an entry's edge-level ground truth true? Exact patching of every q/k/v edge of trained
entries, the effect measured as validation.json measures a node's: the fraction of labelled
positions whose output changes (classification: another argmax; regression: by the tolerance or
more) against the unpatched model, under resample patching on fresh inputs. As JSON.

    python tests/benchmarks/bench_edge_exactness.py ROOT [--entries case-3 planted-ioi ...] [--n 1000]
        [--seed 7] [--bound 0.01]

An edge is a circuit edge when its head-level edge is in circuit.json (`<q>`, `<k>`, `<v>` parts of a
labelled head edge all count as labelled); every other edge (q/k/v level), including edges between
two circuit nodes that the high-level graph lacks, is a non-circuit edge and should move nothing
(issue 36: <= 0.01). Per entry: the largest non-circuit effect and its edge, how many exceed the
bound, the circuit edges' smallest and median effects, and the largest |logit change| of a non-circuit
edge beside the circuit edges' median. Inputs: the case's sampler (seed --seed, counterfactuals
seed + 1000003), padded to n_ctx; the other input shapes are not measured here. With n inputs of
p labelled positions, an effect of 0.01 is about 0.01·n·p changed positions; a fraction never seen
is bounded above by about 3 / (n·p) (rule of three), printed per entry as `resolution`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def measure_entry(path: Path, n: int, seed: int, bound: float) -> dict[str, Any]:
    import torch

    from eval.methods.edge_patching import logit_movement, patched_metrics
    from zoo.edge_exactness import changed_fraction
    from eval.patching.ablation import make_context
    from eval.patching.task import make_task
    from zoo.entry import load_entry_dir
    from zoo.targets import resolve_target

    start = time.perf_counter()
    entry = load_entry_dir(path)
    target = resolve_target(entry, "trained", root=path.parent.parent, device="cpu")
    task = make_task(case=target.case, encoding=target.encoding, reference=target.reference, n=n, seed=seed)
    graph = entry.circuit  # head level
    from eval.core.graph import graph_of

    g = graph_of(target.model)
    ctx = make_context(target.model, task, g, "resample")
    with torch.no_grad():
        clean = ctx.forward()
    tolerance = (entry.validation or {}).get("tolerance") or 0.05
    edges = list(g.at("qkv").edges)
    values = patched_metrics(ctx, [{e: 1.0} for e in edges], changed_fraction(task, clean, tolerance), max_rows=4096)
    effect = {e: float(v) for e, v in zip(edges, values)}
    moved = logit_movement(ctx, edges, max_rows=4096)
    labelled = {tuple(e) for e in graph.edges}
    in_circuit = {e: (e[0], e[1].split("<")[0]) in labelled for e in edges}
    outside = {e: v for e, v in effect.items() if not in_circuit[e]}
    inside = {e: v for e, v in effect.items() if in_circuit[e]}
    worst = max(outside, key=outside.get) if outside else None
    positions = int(task.positions.sum())
    inside_moved = sorted(moved[e] for e in inside)
    return {
        "entry": path.name, "qkv_edges": len(edges), "circuit_qkv_edges": len(inside), "n": n,
        "labelled_positions": positions, "resolution": round(3 / positions, 6),
        "max_out_of_circuit_edge_effect": round(outside[worst], 6) if worst else 0.0,
        "worst_edge": f"{worst[0]}->{worst[1]}" if worst else None,
        "out_of_circuit_edges_above_bound": sum(v > bound for v in outside.values()),
        "top_out_of_circuit": [[f"{s}->{d}", round(v, 4)] for (s, d), v in
                               sorted(outside.items(), key=lambda kv: -kv[1])[:5] if v > 0],
        "circuit_edge_effect": {"min": round(min(inside.values()), 6) if inside else None,
                                "median": round(statistics.median(inside.values()), 6) if inside else None},
        "logit_change": {"max_out_of_circuit": round(max((moved[e] for e in outside), default=0.0), 4),
                         "median_circuit": round(statistics.median(inside_moved), 4) if inside_moved else None},
        "seconds": round(time.perf_counter() - start, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="zoo root whose entries/ holds trained entries")
    parser.add_argument("--entries", nargs="+", default=None, help="entry names (default: every entry)")
    parser.add_argument("--n", type=int, default=1000, help="fresh inputs (and as many counterfactuals)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the inputs (not the validation's)")
    parser.add_argument("--bound", type=float, default=0.01, help="the bound a non-circuit edge must stay within")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    names = args.entries or sorted(p.name for p in (args.root / "entries").iterdir() if not p.name.startswith("."))
    rows = []
    for name in names:
        rows.append(measure_entry(args.root / "entries" / name, args.n, args.seed, args.bound))
        r = rows[-1]
        print(f"{name}: max non-circuit edge effect {r['max_out_of_circuit_edge_effect']:.4f} ({r['worst_edge']}), "
              f"{r['out_of_circuit_edges_above_bound']} above {args.bound}; circuit edges min "
              f"{r['circuit_edge_effect']['min']} ({r['seconds']} s)", file=sys.stderr, flush=True)
    above = [r["entry"] for r in rows if r["max_out_of_circuit_edge_effect"] > args.bound]
    print(json.dumps({"n": args.n, "seed": args.seed, "bound": args.bound, "entries_above_bound": above,
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
