"""Where a planted model's training step and run spend their time: one JSON object with, per model,
the self time (wall and CPU) of each phase of `zoo train planted NAME --epochs E` and its share.

Phases of a step (siit.train_step.run_step): batch (indices, input shapes, high-level targets,
masks), source_run (the source forward pass), realism (distractor readout and loss, loudness
update, targets and norm terms, norm ceiling), base_run (the stacked IIT / strictness / behaviour
forward pass), losses (output losses), backward (of the summed loss: it includes the realism
terms' backward, which has no separate call), optimizer (zero_grad + Adam step). Phases of a run:
periodic_check (siit.train_checks.check, every eval_every steps and at the budget), final_evaluate
(the trainer's last validation in every shape), rescale (the function-preserving head rescale),
validation (siit.validation.validate_model, the entry's per-node effects), write (the entry's
files), other (set-up, data, the progress bar: the rest of the process's wall time).

Times are self times: a phase nested in another (realism in source_run, base_run in a step) is not
counted twice. They are measured by wrapping the functions in this process only (no change to
zoo); the wrappers add microseconds per call, a step takes 0.5 s or more. CPU time is
time.process_time (every thread of the process): on a shared machine wall time is an upper bound,
CPU time is what the work costs.

Usage: python tests/benchmarks/bench_planted_profile.py [--epochs 2] [--threads 1] [--runs 1]
[--compare DIR] [NAME ...]
(default causal-bench-8x8 causal-bench-10x10; 16 steps an epoch at the default batch size, so
--epochs 2 is 32 steps with one check at step 25 and one at the budget). Each model runs in a
fresh process, one after the other; --runs N repeats the list N times (each model's value is then
a list of N runs). --compare DIR also runs the zoo checked out in DIR (`git archive main | tar -x -C
DIR`), interleaved with this checkout run by run: a before/after measured under the same load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

STEP_PHASES = ("batch", "source_run", "realism", "base_run", "losses", "backward", "optimizer")
RUN_PHASES = ("periodic_check", "final_evaluate", "rescale", "validation", "write", "other")


class Clock:
    """Self time per phase: entering a phase pauses the one it is nested in."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []  # [phase, wall start, cpu start]
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def top(self) -> str | None:
        return self.stack[-1][0] if self.stack else None

    def _stop(self, frame: list[Any]) -> None:
        w, c = time.perf_counter(), time.process_time()
        self.wall[frame[0]] = self.wall.get(frame[0], 0.0) + w - frame[1]
        self.cpu[frame[0]] = self.cpu.get(frame[0], 0.0) + c - frame[2]

    def enter(self, phase: str) -> None:
        if self.stack:
            self._stop(self.stack[-1])
        self.calls[phase] = self.calls.get(phase, 0) + 1
        self.stack.append([phase, time.perf_counter(), time.process_time()])

    def leave(self) -> None:
        self._stop(self.stack.pop())
        if self.stack:
            self.stack[-1][1:] = [time.perf_counter(), time.process_time()]


def _wrap(clock: Clock, owner: Any, name: str, phase: str, inside: tuple[str | None, ...] | None = None) -> None:
    """Time owner.name as `phase`, only when called inside one of `inside` (None: always; the
    phase then also stays the caller's when the caller is a phase of its own that nests it)."""
    fn = getattr(owner, name)

    def wrapper(*a: Any, **k: Any) -> Any:
        if inside is not None and clock.top() not in inside:
            return fn(*a, **k)
        clock.enter(phase)
        try:
            return fn(*a, **k)
        finally:
            clock.leave()

    setattr(owner, name, wrapper)


def _instrument(clock: Clock) -> None:
    """Wrap the functions that do each phase (imported here so the child's imports count as other)."""
    import torch

    from siit import loudness, train_checks, train_step, trainer, validation
    from siit.optim import Adam
    from siit.transformer import Transformer
    from zoo import train_entry

    _wrap(clock, train_step, "run_step", "batch")  # its self time: drawing and preparing the batch
    _wrap(clock, train_step, "_source_run", "source_run", ("batch",))
    for name in ("distractor_loss", "readout", "norm_ceiling_loss", "shape_groups"):
        _wrap(clock, train_step, name, "realism", ("source_run",))
    for name in ("update", "targets", "norm_terms"):
        _wrap(clock, loudness.Loudness, name, "realism", ("source_run",))
    _wrap(clock, Transformer, "__call__", "base_run", ("batch",))
    _wrap(clock, train_step, "output_loss", "losses", ("batch",))
    _wrap(clock, torch.Tensor, "backward", "backward", ("batch",))
    _wrap(clock, Adam, "step", "optimizer", ("batch",))
    _wrap(clock, Adam, "zero_grad", "optimizer", ("batch",))
    _wrap(clock, train_checks, "check", "periodic_check", (None,))
    _wrap(clock, train_checks, "evaluate_trainee", "final_evaluate", (None,))
    _wrap(clock, trainer, "rescale_heads", "rescale", (None,))
    _wrap(clock, validation, "validate_model", "validation", (None,))
    _wrap(clock, train_entry, "write_entry_files", "write", (None,))


def _child(name: str, epochs: str, threads: str, root: str) -> None:
    """Run `zoo train planted NAME` in this process with every phase timed; print the raw times."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    clock = Clock()
    _instrument(clock)
    from zoo.cli import keep_freed_memory
    from zoo.cli import main as zoo_main

    keep_freed_memory()  # as the console script does (main(argv) with a list leaves the allocator alone)
    code = zoo_main(["train", "planted", name, "--epochs", epochs, "--threads", threads, "--root", root, "--json"])
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(json.dumps({"code": code, "wall": wall, "cpu": cpu, "phases_wall": clock.wall,
                      "phases_cpu": clock.cpu, "calls": clock.calls}), file=sys.stderr)


def summarise(raw: dict[str, Any], steps: int) -> dict[str, Any]:
    """Per phase: wall and CPU seconds, share of the run's wall time; per step: seconds and share of a step."""
    pw, pc = dict(raw["phases_wall"]), dict(raw["phases_cpu"])
    pw["other"] = raw["wall"] - sum(pw.values())
    pc["other"] = raw["cpu"] - sum(pc.values())
    step_wall = sum(pw.get(p, 0.0) for p in STEP_PHASES)
    step_cpu = sum(pc.get(p, 0.0) for p in STEP_PHASES)
    phases = {p: {"wall_s": round(pw.get(p, 0.0), 3), "cpu_s": round(pc.get(p, 0.0), 3),
                  "share_of_run": round(pw.get(p, 0.0) / raw["wall"], 4)}
              for p in (*STEP_PHASES, *RUN_PHASES)}
    per_step = {p: {"wall_ms": round(1000 * pw.get(p, 0.0) / steps, 1), "cpu_ms": round(1000 * pc.get(p, 0.0) / steps, 1),
                    "share_of_step": round(pw.get(p, 0.0) / step_wall, 4) if step_wall else None}
                for p in STEP_PHASES}
    checks = raw["calls"].get("periodic_check", 0)
    return {"wall_s": round(raw["wall"], 2), "cpu_s": round(raw["cpu"], 2), "steps": steps,
            "step_wall_s": round(step_wall / steps, 4), "step_cpu_s": round(step_cpu / steps, 4),
            "steps_share_of_run": round(step_wall / raw["wall"], 4), "periodic_checks": checks,
            "check_wall_s": round(pw.get("periodic_check", 0.0) / checks, 3) if checks else None,
            "check_cpu_s": round(pc.get("periodic_check", 0.0) / checks, 3) if checks else None,
            "phases": phases, "per_step": per_step}


def run_model(name: str, epochs: int, threads: int, pythonpath: str | None = None) -> dict[str, Any]:
    """One fresh process; pythonpath: another checkout of zoo to run instead of this one."""
    root = tempfile.mkdtemp(prefix="zoo-profile-")
    env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else None
    proc = subprocess.run([sys.executable, __file__, "--child", name, str(epochs), str(threads), root],
                          capture_output=True, text=True, env=env)
    raw = json.loads(proc.stderr.strip().splitlines()[-1])
    steps = json.loads(proc.stdout)["steps"]
    return dict(summarise(raw, steps), exit=raw["code"], load_after=_load())


def _load() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    opts, names, compare = {"epochs": 2, "threads": 1, "runs": 1}, [], None
    it = iter(argv)
    for arg in it:
        if arg[2:] in opts:
            opts[arg[2:]] = int(next(it))
        elif arg == "--compare":
            compare = os.path.abspath(next(it))
        else:
            names.append(arg)
    names = names or ["causal-bench-8x8", "causal-bench-10x10"]
    epochs, threads, runs = opts["epochs"], opts["threads"], opts["runs"]
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "epochs": epochs,
                           "threads": threads, "cores": len(os.sched_getaffinity(0)), "load_before": _load(),
                           "models": {}}
    versions = {"this checkout": None} if compare is None else {compare: compare, "this checkout": None}
    for _ in range(runs):  # interleaved (A B A B) so both versions see the same load
        for name in names:
            for version, path in versions.items():
                key = name if compare is None else f"{name} @ {version}"
                out["models"].setdefault(key, []).append(run_model(name, epochs, threads, path))
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:6])
    else:
        main()
