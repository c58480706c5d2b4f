"""Compile time of every built-in case, as a user sees it: wall time of the whole
`zoo compile case N` process. Prints JSON (medians over --repeats runs).

  cold    empty zoo root: Tracr compiles, JAX compiles haiku's initialiser
  jax     compiled-model cache removed, JAX's persistent compilation cache kept
  cached  the compiled model is loaded from <root>/compiled (safetensors + JSON)

Usage: python tests/benchmarks/bench_compile.py [--cases 3 33] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_compile(case_id: str, root: Path) -> tuple[float, dict]:
    env = dict(os.environ, ZOO_HOME=str(root))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "zoo.cli", "compile", "case", case_id, "--json"],
                         capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", help="case ids (default: all built-in cases)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from rasp_programs.lookup import builtin_case_ids

    results = []
    for case_id in args.cases or builtin_case_ids():
        times: dict[str, list[float]] = {"cold": [], "jax": [], "cached": []}
        summary: dict = {}
        for _ in range(args.repeats):
            root = Path(tempfile.mkdtemp(prefix="zoo-bench-"))
            try:
                t, summary = timed_compile(case_id, root)
                times["cold"].append(t)
                shutil.rmtree(root / "compiled" / f"case-{case_id}")
                times["jax"].append(timed_compile(case_id, root)[0])
                times["cached"].append(timed_compile(case_id, root)[0])
            finally:
                shutil.rmtree(root, ignore_errors=True)
        row = {"case": case_id, **{f"{k}_s_median": round(statistics.median(v), 2) for k, v in times.items()}}
        row.update({k: summary[k] for k in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "nodes", "edges")})
        results.append(row)
        print(json.dumps(row), file=sys.stderr)
    print(json.dumps({"benchmark": "compile", "repeats": args.repeats, "cases": results}, indent=1))


if __name__ == "__main__":
    main()
