"""What a training step and a periodic check cost on a wide model (the large-circuit family's size),
with and without TrainConfig.lean_activations: distribution-shift's circuit placed in an L-layer,
H-head model with d_head 2 (every other component busy with a distractor), one torch thread; one
JSON object.

A wide model's per-head outputs ([batch, pos, H, d_model]) are H times its residual stream, so what
copies, masks or indexes them, not the arithmetic, sets its step's cost (issue 35; issue 36's large
circuits need at least 100 components). Times: median of the steps after two warm-up steps, and one
check (siit.train_checks.evaluate_trainee: every high-level node, every busy node alone and all of
them at once, node level), node-level strictness, and the edge check on --edges random non-circuit
q/k/v edges (Evaluator.edge_siia: each edge patched alone; lean, each run starts at its reader's block,
siit.edge_runs). Each configuration runs in its own process, default and lean alternating (--runs
pairs); the medians over runs are reported with their ratio.

Usage: python tests/benchmarks/bench_wide_step.py [--layers 2] [--heads 49] [--steps 8] [--runs 1]
[--edges 64] [--compare DIR] [--planted NAME] [--strict-edges]. --compare DIR runs both configurations of the zoo checked out
in DIR (`git archive REV | tar -x -C DIR`) as two more columns; --planted NAME measures that planted
model as it trains (its own architecture) instead of the wide one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(layers: int, heads: int, steps: int, lean: int = 0, edges: int = 64, planted: str = "",
            strict_edges: int = 0) -> dict[str, float]:
    """Steps and one check of the wide model (or of the planted model `planted`), in this process."""
    import dataclasses

    import torch

    from planted import get_planted
    from planted.failure_modes import distribution_shift
    from siit import train_checks, train_step
    from siit.config import TrainConfig
    from siit.edges import EdgeLayout
    from siit.trainer import _start, prepare

    torch.set_num_threads(1)
    _as_zoo_process()
    task = (get_planted(planted) if planted else
            dataclasses.replace(distribution_shift(), n_layers=layers, n_heads=heads, d_head=2))
    config = TrainConfig(epochs=4, n_val=256, strict_edges=bool(strict_edges), **({"lean_activations": True} if lean else {}))
    t0 = time.perf_counter()
    s = prepare(task, config)
    prepared = time.perf_counter() - t0
    run = _start(s, config, None, False)
    times = []
    for step in range(steps + 2):
        t0 = time.perf_counter()
        train_step.run_step(run.trainee, run.optimizer, s, config, task.case.task_kind, step)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    train_checks.evaluate_trainee(run.trainee, s, s.evaluator, edges=False)
    check = time.perf_counter() - t0
    layout = EdgeLayout(s.low_config["n_layers"], s.low_config["n_heads"])
    outside = layout.non_circuit(s.corr.map_circuit(task.graph).edges).nonzero()
    some = outside[torch.randperm(outside.shape[0], generator=torch.Generator().manual_seed(0))[:edges]]
    t0 = time.perf_counter()
    s.evaluator.edge_siia(run.trainee.model, some)
    edge_check = time.perf_counter() - t0
    return {"prepare_s": round(prepared, 3), "step_median_s": round(statistics.median(times[2:]), 4),
            "check_s": round(check, 3), "edge_check_s": round(edge_check, 3),
            "edge_check_per_edge_s": round(edge_check / max(1, some.shape[0]), 4),
            "non_circuit_edges": int(outside.shape[0]), "components": task.n_layers * (task.n_heads + 1),
            "busy_nodes": len(s.targets.distractors) if s.targets else 0}


def _as_zoo_process() -> None:
    """The allocator settings a `zoo` command runs with (zoo.cli.keep_freed_memory): without them a
    wide model's step maps its [batch, pos, heads, d_model] temporaries afresh each time, and the
    page faults (system time) doubled what a large-circuit step measured here against `zoo train`.
    A checkout from before the setting (--compare) runs without it."""
    try:
        from zoo.cli import keep_freed_memory
    except ImportError:
        return
    keep_freed_memory()


def _child(checkout: Path, args: argparse.Namespace, lean: bool) -> dict[str, float]:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
            "from bench_wide_step import measure; print(json.dumps(measure(*map(int, sys.argv[3:8]), sys.argv[8], int(sys.argv[9]))))")
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", code, str(checkout), str(Path(__file__).parent),
                          str(args.layers), str(args.heads), str(args.steps), str(int(lean)), str(args.edges),
                          args.planted, str(int(args.strict_edges))],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=49)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--edges", type=int, default=64, help="non-circuit edges the edge check patches (0: none)")
    parser.add_argument("--compare", type=Path, default=None)
    parser.add_argument("--planted", default="", metavar="NAME",
                        help="measure this planted model (e.g. causal-bench-12x12) instead of the wide one")
    parser.add_argument("--strict-edges", action="store_true",
                        help="steps with edge-level strictness rows (the failure-mode families' and large-circuit's "
                             "training); the check stays node-level")
    args = parser.parse_args(argv)
    configs = {"default": (ROOT, False), "lean_activations": (ROOT, True)}
    if args.compare is not None:
        configs = {f"default @ {args.compare}": (args.compare, False),
                   f"lean_activations @ {args.compare}": (args.compare, True), **configs}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in configs}
    for _ in range(args.runs):
        for name, (path, lean) in configs.items():
            runs[name].append(_child(path, args, lean))
    shape = {"planted": args.planted} if args.planted else {"layers": args.layers, "heads": args.heads, "d_head": 2}
    result = {**shape, "steps": args.steps, "runs": args.runs, "strict_edges": args.strict_edges,
              "configs": {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                          for name, rs in runs.items()}}
    before, after = result["configs"]["default"], result["configs"]["lean_activations"]
    result["default_over_lean"] = {k: round(before[k] / after[k], 2) for k in ("step_median_s", "check_s",
                                                                               "edge_check_s") if after[k] > 0}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
