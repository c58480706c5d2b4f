"""Planted models at every scale: run `zoo train planted NAME` in a fresh process each and print one
JSON row per model (met, steps, process wall time, peak RSS, accuracy / IIA / SIIA, the largest
out-of-circuit and the smallest circuit resample effect over every input shape).

    python tests/benchmarks/bench_planted.py [--names causal-bench-2x2,causal-bench-4x4] [--root DIR]

Not part of CI (it trains models). Wall time and peak memory are the whole process's, measured
from outside (resource.getrusage of the child), as a user running the command would see them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_one(name: str, root: Path, extra: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "zoo.cli", "train", "planted", name, "--root", str(root),
                           "--json", *extra], capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode not in (0, 1):
        return {"name": name, "error": proc.stderr.strip().splitlines()[-1:] or ["?"]}
    s = json.loads(proc.stdout)
    entry = Path(s["entry"])
    validation = json.loads((entry / "validation.json").read_text())
    rows = validation["node_effects"]
    return {
        "name": name, "met": s["met_criterion"], "steps": s["steps"], "train_s": s["wall_time_s"],
        "process_s": round(wall, 1),
        # ru_maxrss of children is the largest child so far: exact for the first run, a bound after
        "peak_rss_mb": round(max(peak, before) / 1024, 1),
        "accuracy": s["accuracy"], "iia_min": s["iia_min"], "siia_min": s["siia_min"],
        "max_out_of_circuit_resample": max((r["resample"] for r in rows if not r["in_circuit"]), default=0.0),
        "min_circuit_resample": min(r["resample"] for r in rows if r["in_circuit"]),
        "components": len(rows), "load_average_1min": os.getloadavg()[0],
    }


def main() -> None:
    from planted import planted_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", default=",".join(planted_names()))
    parser.add_argument("--root", default=None, help="zoo root (default: a temporary folder)")
    parser.add_argument("extra", nargs="*", help="more `zoo train` options after --, e.g. -- --criterion 0.99")
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="bench-planted-"))
    for name in args.names.split(","):
        print(json.dumps(run_one(name, root, args.extra)), flush=True)


if __name__ == "__main__":
    main()
