"""Time `zoo train --all` (the 16 built-in cases, default configuration, worker processes on this
machine; target: under 15 minutes on 2 cores) in a fresh zoo root, and print its summary as JSON:
one row per case (met, steps, wall time, accuracy, IIA min, SIIA min, largest out-of-circuit effect
under resample ablation) plus the whole run's wall time and the serial sum of the cases' times.

Usage: python tests/benchmarks/bench_train_all.py [--cases 3,4,...] [--jobs J] [--ray ADDRESS] [--root DIR]
(extra options are passed to `zoo train`; without --cases it trains --all)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time


def main(argv: list[str]) -> int:
    from zoo.cli import main as zoo

    if "--root" not in argv:
        argv = [*argv, "--root", tempfile.mkdtemp(prefix="zoo-train-all-")]
    if not any(flag in argv for flag in ("--cases", "--all", "--generated")):
        argv = ["--all", *argv]
    start = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = zoo(["train", *argv, "--json"])
    wall = time.perf_counter() - start
    try:
        summary = json.loads(out.getvalue())
    except ValueError:
        print(out.getvalue(), file=sys.stderr)
        return code or 2
    rows = summary["rows"]
    summary["benchmark"] = {
        "command": "zoo train " + " ".join(argv),
        "cores": len(os.sched_getaffinity(0)), "exit_code": code, "wall_s": round(wall, 1),
        "serial_sum_s": round(sum(r["wall_s"] or 0 for r in rows), 1),
        "met": sum(bool(r["met_criterion"]) for r in rows), "cases": len(rows),
        "under_15_minutes": wall < 900,
    }
    print(json.dumps(summary, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
