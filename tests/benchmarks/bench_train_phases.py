"""Where `zoo train case N` spends its time: one JSON object with, per case, the whole process's
wall time and its phases (start-up, compile, SIIT steps, evaluation during training, final
validation, writing the entry), medians over interleaved runs (case A, case B, A, B, ...).

Each run is a fresh process in a fresh zoo root (as a user's first `zoo train` in a new root);
the compiled-case user cache ($ZOO_COMPILE_CACHE) is shared by the runs and warmed first, so
"compile" is what a fresh root costs once some root has compiled the case. Phases are timed by
wrapping the functions that do them (monkeypatching inside the child process only);
"start-up" is the process's wall time before the CLI runs (interpreter and imports),
"other" the rest (bookkeeping, progress bar, the final rescale).

Usage: python tests/benchmarks/bench_train_phases.py [--runs 3] [--cold] [--compare DIR] [CASE ...]
(default cases 33 3). --cold: no user cache (every run compiles with Tracr, as before the cache
existed). --compare DIR: also run the zoo checked out in DIR (e.g. `git archive main | tar -x -C
DIR`, put first on PYTHONPATH), interleaved with this checkout run by run (A B A B), and report
both: a before/after table measured under the same load.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = ("startup", "compile", "steps", "evaluation", "validation", "write")


def _child(case: str, root: str) -> None:
    """Run `zoo train case <case>` in this process with each phase's function timed."""
    t0 = time.perf_counter()
    import importlib

    from zoo.cli import main as zoo_main

    spent = {p: 0.0 for p in PHASES[1:]}
    counts = {"steps": 0, "evaluation": 0}

    def timed(module: str, name: str, phase: str) -> None:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            return
        fn = getattr(mod, name, None)
        if fn is None:
            return

        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[phase] += time.perf_counter() - start
                counts[phase] = counts.get(phase, 0) + 1

        setattr(mod, name, wrapper)

    timed("rasp_programs.compile", "compile_case", "compile")
    for module in ("siit.trainer", "siit.train_step"):
        timed(module, "_step", "steps")
        timed(module, "run_step", "steps")
    for module in ("siit.trainer", "siit.train_checks"):
        timed(module, "_evaluate", "evaluation")
        timed(module, "evaluate_trainee", "evaluation")
    timed("siit.validation", "validate_model", "validation")
    for module in ("zoo.commands.training", "zoo.train_entry"):
        timed(module, "_write", "write")
        timed(module, "write_entry_files", "write")
    startup = time.perf_counter() - t0
    sys.argv = ["zoo", "train", "case", case, "--root", root, "--json"]
    code = zoo_main()  # as the console script runs it: main() reads sys.argv, and the process exits next
    print(json.dumps({"code": code, "import_s": startup, "spent": spent, "counts": counts}), file=sys.stderr)


def run_once(case: str, env: dict[str, str]) -> dict:
    root = tempfile.mkdtemp(prefix="zoo-phases-")
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, __file__, "--child", case, root], capture_output=True, text=True,
                          env=env)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    summary = json.loads(proc.stdout)
    spent = report["spent"]
    known = sum(spent.values())
    # start-up: interpreter + imports before the CLI parses; everything else untimed is "other"
    startup = report["import_s"] + _interpreter_s(env)
    row = {"wall_s": wall, "cpu_s": cpu, "startup": startup, **spent, "other": max(0.0, wall - startup - known),
           "steps_n": summary["steps"], "met": summary["met_criterion"], "exit": report["code"],
           "evaluations_n": report["counts"].get("evaluation", 0)}
    return row


_INTERP: dict[str, float] = {}


def _interpreter_s(env: dict[str, str]) -> float:
    """Wall time of a bare `python -c pass` (the interpreter's own start-up), measured once."""
    if "s" not in _INTERP:
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            runs.append(time.perf_counter() - start)
        _INTERP["s"] = statistics.median(runs)
    return _INTERP["s"]


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    runs, cold, cases, compare = 3, False, [], None
    it = iter(argv)
    for arg in it:
        if arg == "--runs":
            runs = int(next(it))
        elif arg == "--cold":
            cold = True
        elif arg == "--compare":
            compare = os.path.abspath(next(it))
        else:
            cases.append(arg)
    cases = cases or ["33", "3"]
    env = dict(os.environ)
    env["ZOO_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="zoo-compile-cache-") if not cold else "off"
    if not cold:  # warm the user cache once (it is what every later fresh root reuses)
        for case in cases:
            subprocess.run([sys.executable, "-m", "zoo.cli", "compile", "case", case, "--root",
                            tempfile.mkdtemp(prefix="zoo-warm-")], env=env, capture_output=True, check=True)
    env.pop("PYTHONPATH", None)
    versions = {"this checkout": env}
    if compare is not None:
        versions = {compare: dict(env, PYTHONPATH=compare), "this checkout": env}
    rows: dict[str, list[dict]] = {f"{c} @ {v}": [] for c in cases for v in versions}
    loads = [os.getloadavg()[0]]
    for _ in range(runs):  # interleaved: A B A B
        for case in cases:
            for name, version_env in versions.items():
                rows[f"{case} @ {name}"].append(run_once(case, version_env))
                loads.append(os.getloadavg()[0])
    out = {"runs": runs, "cold_compile": cold, "load_avg_1min_median": statistics.median(loads),
           "load_avg_1min_range": [min(loads), max(loads)], "cores": len(os.sched_getaffinity(0)), "cases": {}}
    for case, rs in rows.items():
        keys = ("wall_s", "cpu_s", *PHASES, "other")
        out["cases"][case] = {
            "median": {k: round(statistics.median(r[k] for r in rs), 3) for k in keys},
            "steps": [r["steps_n"] for r in rs], "evaluations": [r["evaluations_n"] for r in rs],
            "met": [r["met"] for r in rs], "walls_s": [round(r["wall_s"], 2) for r in rs],
        }
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        main()
