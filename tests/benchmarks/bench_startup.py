"""What `zoo --help` and the import path of `zoo train` load (python -X importtime): per command,
the median wall time of the whole process over 3 runs, the cumulative import time, and the
packages that cost the most. One JSON object.

Usage: python tests/benchmarks/bench_startup.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

# the modules `zoo train case N` imports before its first step (zoo.commands.training.run_train)
TRAIN_IMPORTS = ("import zoo.cli, zoo.commands.training, torch, siit.trainer, siit.validation, "
                 "zoo.high_level_source, rasp_programs.compile, rasp_programs.case")
COMMANDS = {
    "zoo --help": [sys.executable, "-X", "importtime", "-m", "zoo.cli", "--help"],
    "zoo train (imports)": [sys.executable, "-X", "importtime", "-c", TRAIN_IMPORTS],
}


def top_level(stderr: str) -> dict[str, float]:
    """Cumulative import time per top-level package (ms) from -X importtime's lines."""
    out: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        if not cumulative.isdigit() or line.split("|")[2].startswith("  "):
            continue  # header or a nested import (counted in its parent)
        root = name.split(".")[0]
        out[root] = out.get(root, 0.0) + int(cumulative) / 1000
    return out


def measure(argv: list[str]) -> dict:
    walls, tops = [], []
    for _ in range(3):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        tops.append(top_level(proc.stderr))
    last = tops[-1]
    biggest = sorted(last.items(), key=lambda kv: -kv[1])[:8]
    return {"wall_s_median": round(statistics.median(walls), 3), "import_ms_total": round(sum(last.values()), 1),
            "heaviest_ms": {k: round(v, 1) for k, v in biggest},
            "loads_jax_or_tracr_compiler": any(k in last for k in ("jax",)),
            "loads_transformer_lens": "transformer_lens" in last}


def main() -> dict:
    out = {"load_avg_1min": os.getloadavg()[0], "commands": {name: measure(argv) for name, argv in COMMANDS.items()}}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
