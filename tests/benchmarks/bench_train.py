"""Benchmark `zoo train case N` as a whole process: median wall time of 3 runs (compiled case
already cached) and peak RSS. Prints JSON. Usage: python tests/benchmarks/bench_train.py [33 3 ...]"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(case: str, root: str) -> dict:
    out = os.path.join(root, "entries", f"case-{case}")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "zoo.cli", "train", "case", case, "--root", root,
                           "--out", out, "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return {"wall_s": round(wall, 3), "exit": proc.returncode, "summary": summary}


def main(cases: list[str]) -> None:
    root = tempfile.mkdtemp(prefix="zoo-bench-")
    results = {}
    for case in cases:
        subprocess.run([sys.executable, "-m", "zoo.cli", "compile", "case", case, "--root", root],
                       capture_output=True, check=True)  # cache the compiled case first
        runs = [run_once(case, root) for _ in range(3)]
        last = runs[-1]["summary"]
        results[case] = {
            "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "walls_s": [r["wall_s"] for r in runs],
            "exit_codes": [r["exit"] for r in runs],
            **{k: last.get(k) for k in ("met_criterion", "steps", "accuracy", "iia_min", "siia_min", "siia_all")},
        }
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"cases": results, "peak_rss_mb_children": round(peak_kb / 1024, 1)}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:] or ["33", "3"])
