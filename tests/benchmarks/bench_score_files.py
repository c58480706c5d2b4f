"""Reading MIB score files must be linear in the edge count: wall time of read_score_file, as JSON.

    python tests/benchmarks/bench_score_files.py [--sizes 6x4 8x8 12x12 16x16]

For each LAYERSxHEADS graph, a score file with a random score on every q/k/v edge and a folder of
three circuit files (to_circuit_files) are written to a temporary directory and read back; the
median of three reads is reported with its time per edge (constant when reading is linear; a
list.index-style sort would grow it with the edge count).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["6x4", "8x8", "12x12", "16x16"])
    args = parser.parse_args()
    from eval.core.graph import ComputationGraph
    from eval.methods.interface import CircuitRun, MethodOutput, read_score_file, to_circuit_files, to_score_file

    rows = []
    rng = random.Random(0)
    for size in args.sizes:
        layers, heads = (int(x) for x in size.split("x"))
        graph = ComputationGraph(n_layers=layers, n_heads=heads)
        edges = graph.at("qkv").edges
        scores = MethodOutput(edge_scores={e: rng.uniform(-1, 1) for e in edges})
        circuits = MethodOutput(circuits=tuple(
            CircuitRun(param=p, nodes=frozenset(graph.components), edges=frozenset(graph.head_edges[::k]))
            for p, k in ((0.1, 2), (0.2, 3), (0.3, 5))))
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / "scores.json"
            file.write_text(json.dumps(to_score_file(scores)))
            folder = Path(tmp) / "circuits"
            folder.mkdir()
            for name, data in to_circuit_files(circuits, graph).items():
                (folder / name).write_text(json.dumps(data))
            row = {"model": size, "qkv_edges": len(edges)}
            for what, path in (("score_file", file), ("circuit_folder", folder)):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    read_score_file(path, graph)
                    times.append(time.perf_counter() - start)
                row[f"{what}_s"] = round(statistics.median(times), 3)
                row[f"{what}_us_per_edge"] = round(1e6 * statistics.median(times) / len(edges), 2)
            rows.append(row)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
