"""Ranking q/k/v edge scores must be n log n: wall time of eval.scoring.faithfulness.top_edges on
all-tied scores (ordering falls to graph position, which list.index once made quadratic), as JSON.

    python tests/benchmarks/bench_top_edges.py [--sizes 6x4 8x8 12x12 16x16]

The median of three rankings per LAYERSxHEADS graph, with its time per edge (near constant when
ranking is n log n; 12x12 took seconds with the quadratic version, about 5e8 comparisons).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    from eval.core.graph import ComputationGraph
    from eval.scoring.faithfulness import qkv_scores, top_edges

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["6x4", "8x8", "12x12", "16x16"], metavar="LxH")
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        layers, heads = (int(x) for x in size.split("x"))
        graph = ComputationGraph(n_layers=layers, n_heads=heads)
        scores = qkv_scores(graph, {e: 1.0 for e in graph.at("qkv").edges})
        walls = []
        for _ in range(3):
            start = time.perf_counter()
            ranked = top_edges(scores, len(scores), absolute=True)
            walls.append(time.perf_counter() - start)
        assert ranked == list(graph.at("qkv").edges)
        wall = statistics.median(walls)
        rows.append({"size": size, "edges": len(scores), "median_s": round(wall, 4),
                     "us_per_edge": round(1e6 * wall / len(scores), 3)})
    print(json.dumps({"benchmark": "top_edges", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
