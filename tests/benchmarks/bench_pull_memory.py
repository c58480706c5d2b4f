"""Peak memory of `zoo pull` for the largest entry the bounds accept (issue 31), measured with
`/usr/bin/time -v` around a `zoo pull` process against the test Hub on 127.0.0.1.

The entry: case 33's compiled model as a data-only case whose context is as long as the behaviour
check's activation bound allows (zoo.behaviour_check.MAX_ACTIVATION_BYTES), kilobytes of weights;
and, for contrast, the same with a context one position too long (refused before running).
Prints JSON. Usage: python tests/benchmarks/bench_pull_memory.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the test Hub and its entry builders

REPO = "zoo-bench/pull-memory"


def largest_width(config: dict) -> int:
    """The longest input width whose behaviour check fits the activation bound."""
    from zoo.behaviour_check import MAX_ACTIVATION_BYTES, N_INPUTS, activation_bytes

    width = 1
    while activation_bytes(config, N_INPUTS, width + 1) <= MAX_ACTIVATION_BYTES:
        width += 1
    return width


def long_entry(base: dict[str, bytes], n_ctx: int) -> dict[str, bytes]:
    import hashlib

    import torch
    from safetensors.torch import load, save

    config, case = json.loads(base["config.json"]), json.loads(base["case.json"])
    config["n_ctx"] = n_ctx
    case.update(id="x:y", max_seq_len=n_ctx - 1)
    case["encoding"]["max_seq_len"] = n_ctx - 1
    tensors = load(base["model.safetensors"])
    tensors["pos_embed.W_pos"] = torch.zeros(n_ctx, config["d_model"])
    files = {**base, "config.json": json.dumps(config).encode(), "case.json": json.dumps(case).encode(),
             "model.safetensors": save(tensors, metadata={"format": "zoo/1"})}
    sums = {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if n != "manifest.json"}
    files["manifest.json"] = json.dumps({"format": "zoo/1", "files": sums}).encode()
    return files


def pull(endpoint: str, work: Path, tag: str) -> dict:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(work / f"hf-{tag}"), "HF_HUB_DISABLE_XET": "1",
           "ZOO_REPO_ID": REPO, "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "zoo.cli", "pull", "case", "x:y",
                           "--root", str(work / f"root-{tag}")], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("zoo:")]
    return {"exit": proc.returncode, "wall_s": round(wall, 2),
            "peak_rss_mib": round(int(peak.group(1)) / 1024, 1) if peak else None,
            "stdout": proc.stdout.strip()[:300], "error": lines[0][:300] if lines else None}


def main() -> None:
    from hub_server import HubServer, build_entry

    from rasp_programs.case import get_case
    from rasp_programs.compile import compile_case
    from zoo.behaviour_check import MAX_ACTIVATION_BYTES

    work = Path(tempfile.mkdtemp(prefix="zoo-bench-pull-"))
    compiled = compile_case(get_case("33"), work / "compiled")
    base_dir = build_entry(compiled, work / "base")
    base = {p.name: p.read_bytes() for p in base_dir.iterdir()}
    width = largest_width(json.loads(base["config.json"]))
    results = {}
    with HubServer() as hub:
        for tag, n_ctx in (("at_bound", width), ("over_bound", width + 1)):
            hub.put_files(REPO, {f"case-x-y/{n}": d for n, d in long_entry(base, n_ctx).items()})
            results[tag] = {"n_ctx": n_ctx, **pull(hub.endpoint, work, tag)}
    print(json.dumps({"bound_mib": MAX_ACTIVATION_BYTES >> 20, "date": time.strftime("%Y-%m-%d"),
                      "cores": os.cpu_count(), **results}, indent=1))


if __name__ == "__main__":
    main()
