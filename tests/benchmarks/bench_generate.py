"""Time for `zoo generate` to yield verified cases, as a user sees it: the wall time of the whole
`zoo generate --count N --layers 2-4 --json` process (imports included). Prints JSON: wall time,
time per 100 kept cases, share of drawn programs kept, counts of reject reasons, and the spread of
layers, heads and task kinds over the kept cases. Target (issue 12): 100 cases of 2-4 layers in
under 10 minutes on 2 cores.

Usage: python tests/benchmarks/bench_generate.py [--count 100] [--seed 0] [--layers 2-4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", default="2-4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ, ZOO_HOME=root)
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "zoo.cli", "generate", "--count", str(args.count),
                              "--seed", str(args.seed), "--layers", args.layers, "--json"],
                             capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
    if out.returncode not in (0, 1):
        sys.exit(f"zoo generate failed ({out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    report = json.loads(out.stdout)
    kept = report["cases"]
    print(json.dumps({
        "command": f"zoo generate --count {args.count} --seed {args.seed} --layers {args.layers} --json",
        "cpu_count": os.cpu_count(),
        "kept": len(kept),
        "draws": report["draws"],
        "kept_share": report["kept_share"],
        "rejects": report["rejects"],
        "wall_s": round(wall, 1),
        "generate_s": report["seconds"],
        "s_per_100_kept": round(100 * wall / max(1, len(kept)), 1),
        "met_target_10min_per_100": 100 * wall / max(1, len(kept)) < 600,
        "layers": dict(sorted(Counter(c["layers"] for c in kept).items())),
        "heads": dict(sorted(Counter(c["heads"] for c in kept).items())),
        "task_kind": dict(Counter(c["task_kind"] for c in kept)),
        "circuit_share": round(sum(c["nodes"] / c["components"] for c in kept) / max(1, len(kept)), 3),
        "reject_examples": {r["reason"]: r["detail"][:160] for r in report["rejected"]},
    }, indent=1))


if __name__ == "__main__":
    main()
