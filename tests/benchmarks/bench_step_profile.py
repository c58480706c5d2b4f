"""Where one SIIT training step spends its time (issue 35: "measure with the torch profiler before
and after, and keep the measurement"): one JSON object with the step's wall time, how many torch
operators it dispatches, and the operators that take most of it, for `zoo train case N`'s own steps.

The run is a real `zoo train case N` in this process (fresh zoo root, compiled case from the user
cache); siit.train_step.run_step is wrapped so that steps [--skip, --skip + --steps) run under
torch.profiler (CPU activities) and the --steps after them are timed bare, so the profiler's own
overhead is not in the wall figure; in those bare steps the backward pass and the optimiser's update
are timed apart (wrapping torch.Tensor.backward and siit.optim.Adam.step). Training itself is
unchanged: the same weights as without the benchmark. --by-source lists which lines of the project
dispatch the most operators (the profiler's Python stacks; slower).

Usage: python tests/benchmarks/bench_step_profile.py [--case 33] [--skip 20] [--steps 40] [--top 15]
[--by-source] [--busy-components K] (with --by-source the profiled steps' own figure includes the stacks' cost; the bare one does not)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="33")
    ap.add_argument("--skip", type=int, default=20, help="steps before the profiled ones (warm-up)")
    ap.add_argument("--steps", type=int, default=40, help="profiled steps, then as many timed bare")
    ap.add_argument("--top", type=int, default=15, help="operators to list")
    ap.add_argument("--by-source", action="store_true", help="also count operators per line of the project")
    ap.add_argument("--busy-components", type=int, default=1, metavar="K",
                    help="zoo train's --busy-components (1: the default, one scalar a busy node)")
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    import siit.optim as optim
    import siit.train_step as train_step
    from zoo.cli import main as zoo_main

    original, backward, update = train_step.run_step, torch.Tensor.backward, optim.Adam.step
    state: dict = {"n": 0, "bare": [], "backward": [], "optimizer": [], "prof": None, "timing": False}

    def timed(fn, key):
        def inner(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if state["timing"]:
                    state[key].append(time.perf_counter() - start)
        return inner

    lo, mid, hi = args.skip, args.skip + args.steps, args.skip + 2 * args.steps

    def wrapped(*a, **k):
        n = state["n"]
        state["n"] += 1
        if n == lo:
            state["prof"] = profile(activities=[ProfilerActivity.CPU], with_stack=args.by_source)
            state["prof"].__enter__()
        if n == mid and state["prof"] is not None:
            state["prof"].__exit__(None, None, None)
        state["timing"] = mid <= n < hi
        start = time.perf_counter()
        out = original(*a, **k)
        state["timing"] = False
        if mid <= n < hi:
            state["bare"].append(time.perf_counter() - start)
        return out

    train_step.run_step = wrapped
    torch.Tensor.backward = timed(backward, "backward")
    optim.Adam.step = timed(update, "optimizer")
    root = tempfile.mkdtemp(prefix="zoo-step-profile-")
    saved = sys.stdout
    sys.stdout = open(os.devnull, "w")  # the CLI's --json summary; this benchmark prints its own
    try:
        busy = ["--busy-components", str(args.busy_components)] if args.busy_components != 1 else []
        code = zoo_main(["train", "case", args.case, "--root", root, "--json", "--threads", "1", *busy])
    finally:
        sys.stdout.close()
        sys.stdout = saved
        train_step.run_step, torch.Tensor.backward, optim.Adam.step = original, backward, update
    prof = state["prof"]
    if prof is None or len(state["bare"]) < args.steps:
        raise SystemExit(f"case {args.case} trained {state['n']} steps, fewer than --skip + 2 x --steps")
    events = prof.key_averages()
    total_us = sum(e.self_cpu_time_total for e in events)
    calls = sum(e.count for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    result = {
        "case": args.case, "busy_components": args.busy_components, "exit": code, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "steps_trained": state["n"], "profiled_steps": [lo, mid], "bare_steps": [mid, hi],
        "step_ms_median_bare": round(1e3 * statistics.median(state["bare"]), 3),
        "step_ms_profiled": round(total_us / 1e3 / args.steps, 3),
        "ops_per_step": round(calls / args.steps, 1),
        "backward_ms_median_bare": round(1e3 * statistics.median(state["backward"]), 3),
        "optimizer_ms_median_bare": round(1e3 * statistics.median(state["optimizer"]), 3),
        "top_ops": [{"op": e.key, "calls_per_step": round(e.count / args.steps, 1),
                     "self_ms_per_step": round(e.self_cpu_time_total / 1e3 / args.steps, 3)} for e in top],
    }
    if args.by_source:
        result["ops_per_step_by_source"] = _by_source(prof, args.steps, args.top)
    print(json.dumps(result, indent=1))
    return result


_PROJECT = re.compile(r"(^|/)(siit|eval|zoo|planted|rasp_programs)/[^/]+[.]py$")


def _by_source(prof, steps: int, top: int) -> list[dict]:
    """Operators per step (outermost aten calls only) counted at the innermost frame of the project's
    own code above them ("backward": the autograd engine's)."""
    counts: dict[str, int] = {}
    for e in prof.events():
        parent = e.cpu_parent
        if not e.name.startswith("aten::") or (parent is not None and parent.name.startswith("aten::")):
            continue
        where = "elsewhere"
        while parent is not None:
            if parent.name.startswith("autograd::engine"):
                where = "backward"
                break
            if _PROJECT.search(parent.name.split("(")[0]):
                where = parent.name.split("/work/")[-1]
                break
            parent = parent.cpu_parent
        counts[where] = counts.get(where, 0) + 1
    rows = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return [{"where": where, "ops_per_step": round(n / steps, 1)} for where, n in rows]


if __name__ == "__main__":
    main()
