"""Peak memory and time of validation.json's two bounds (siit.effect_bounds, siit.edge_bounds) on a planted
model's bound sample, and of training's final edge check (Evaluator.edge_siia on the validation set in every
input shape), each in its own process; one JSON object.

A wide model's bound sample held whole did not fit in 24 GB: planted large-circuit's final validation was
OOM-killed at 20.8 GB (issue 36), its node bound alone peaking near 11 GB. siit.bound_chunks runs the sample
in chunks of rows, and a lean evaluator's edge check the same way. The model is the planted model's architecture at its seeded initial weights (the
bounds' memory and work depend on the shapes, not on what the weights learned); the peak is the process's
resident set sampled every 50 ms (and ru_maxrss), beside `base_mb`, what the set-up alone holds.

Usage: python tests/benchmarks/bench_bound_memory.py [--planted large-circuit] [--n 300]
[--bound nodes,edges,edge_check] [--compare DIR]. --compare DIR measures the zoo checked out in DIR
(`git archive REV | tar -x -C DIR`) too, each bound before and after in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def measure(planted: str, bound: str, n: int) -> dict[str, Any]:
    """One bound of `planted` at its initial weights on n sequences per length, in this process."""
    import torch

    from planted.registry import get_planted
    from siit.config import TrainConfig
    from siit.initialise import init_weights
    from siit.train_setup import prepare
    from siit.transformer import Transformer

    torch.set_num_threads(1)
    task = get_planted(planted)
    setup = prepare(task, TrainConfig(lean_activations=bool(getattr(task, "lean_activations", False)), strict_edges=True))
    model = Transformer(setup.low_config).eval()
    init_weights(model, torch.Generator().manual_seed(0))
    peak = [0]

    def watch() -> None:
        while True:
            with open("/proc/self/status") as status:
                rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
            peak[0] = max(peak[0], rss)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    time.sleep(0.2)
    base = peak[0]
    start = time.perf_counter()
    if bound == "nodes":
        from siit.effect_bounds import effect_bounds
        section = effect_bounds(model, setup.final_evaluator, task, n=n)
    elif bound == "edge_check":  # training's final check: every non-circuit edge on the validation set's shapes
        from siit.interventions import node_activations

        d = setup.final_evaluator.data
        siia = setup.final_evaluator.edge_siia(model, setup.non_circuit_edges.nonzero(),
                                               acts=node_activations(model, d.tokens, d.mask, d.present))
        section = {"n_sequences": len(d), "max_effect": round(1.0 - float(siia.min()), 6),
                   "max_upper_95": round(float(siia.double().sum()), 6)}  # the SIIA values' checksum
    else:
        from siit.edge_bounds import edge_bounds
        section = edge_bounds(model, setup.final_evaluator, task, n=n)
    wall = time.perf_counter() - start
    return {"bound": bound, "n_per_length": n, "n_sequences": section.get("n_sequences"), "wall_s": round(wall, 1),
            "base_mb": base // 1024, "peak_mb": peak[0] // 1024,
            "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "max_effect": section.get("max_effect"), "max_upper_95": section.get("max_upper_95")}


def _child(checkout: Path, planted: str, bound: str, n: int) -> dict[str, Any]:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
            "from bench_bound_memory import measure; print(json.dumps(measure(sys.argv[3], sys.argv[4], int(sys.argv[5]))))")
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", code, str(checkout), str(Path(__file__).parent), planted, bound, str(n)],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:  # e.g. the OOM killer: say so, do not lose the other measurements
        return {"bound": bound, "exit_code": out.returncode, "stderr_tail": out.stderr[-400:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--planted", default="large-circuit")
    parser.add_argument("--n", type=int, default=300, help="sequences per input length (validation's BOUND_N: 300)")
    parser.add_argument("--bound", default="nodes,edges,edge_check",
                        help="what to measure, comma-separated: nodes, edges (the bounds), edge_check (training's)")
    parser.add_argument("--compare", type=Path, default=None, help="a checkout to measure too (before)")
    args = parser.parse_args(argv)
    bounds = [b for b in args.bound.split(",") if b]
    if not bounds or any(b not in ("nodes", "edges", "edge_check") for b in bounds):
        parser.error(f"--bound takes nodes, edges and/or edge_check, got {args.bound!r}")
    checkouts = {"this": ROOT} if args.compare is None else {"before": args.compare, "this": ROOT}
    result: dict[str, Any] = {"planted": args.planted, "n_per_length": args.n, "configs": {k: {} for k in checkouts}}
    for bound in bounds:
        for name, path in checkouts.items():
            result["configs"][name][bound] = _child(path, args.planted, bound, args.n)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
