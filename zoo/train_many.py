"""`zoo train --all` / `--catalogue` / `--cases 3,4` / `--generated N`: train many entries, each in its own worker.

Engines: worker processes on this machine (concurrent.futures, `--jobs`, default one per core,
each with cores/jobs torch threads) or Ray tasks on a cluster (`--ray ADDRESS`; `local` starts a
Ray instance on this machine). Ray is the scheduler there; nothing here schedules.

A worker compiles, trains, validates and returns the entry's files as bytes (so Ray workers on
other nodes need no shared disk); this process installs them under <root>/entries (a run that
missed its criterion never replaces an entry that met it: `case-N.failed/`). Entries already in the
root with met_criterion are skipped, so a killed run rerun trains only what is missing. A failed
case (criterion not met, or an error) is a row of the summary and does not stop the others. The
summary is printed as a table and written to <root>/train-all-summary.json; exit 1 if any failed.
Ctrl-C or SIGTERM stops every worker after its running step (checkpoints kept: `--resume` continues
them); a worker whose parent died outright interrupts itself the same way instead of training on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SUMMARY_FILE = "train-all-summary.json"
_RAY_ADDRESS = re.compile(r"(auto|local|(ray://)?[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5})")
# options a worker needs from the command line (zoo.commands.training's train options)
_OPTIONS = ("scheme", "strict_weight", "natural", "no_distractors", "epochs", "seed", "lr",
            "batch_size", "n_train", "min_d_head", "criterion", "resume", "root")


def multi_requested(args: argparse.Namespace) -> bool:
    return bool(args.all or args.catalogue or args.cases or args.generated is not None)


def case_ids(args: argparse.Namespace) -> list[str]:
    """The cases named by --all / --cases / --generated, checked; a one-line ZooError otherwise."""
    from zoo.errors import ZooError

    given = [flag for flag, on in (("--all", args.all), ("--catalogue", args.catalogue), ("--cases", args.cases),
                                   ("--generated", args.generated is not None)) if on]
    if len(given) > 1:
        raise ZooError(f"give one of --all, --catalogue, --cases, --generated, not {' and '.join(given)}")
    if args.kind or args.id:
        raise ZooError(f"give either `case <id>` or {given[0]}, not both")
    if args.out:
        raise ZooError(f"--out names one entry; {given[0]} writes entries under --root")
    if args.jobs is not None and args.jobs < 1:
        raise ZooError(f"--jobs must be >= 1, got {args.jobs}")
    if args.ray is not None and not _RAY_ADDRESS.fullmatch(args.ray):
        raise ZooError(f"--ray: bad address {args.ray!r}; expected HOST:PORT, ray://HOST:PORT, auto or local")
    if args.ray not in (None, "auto", "local"):
        _check_reachable(args.ray)
    if args.all:  # InterpBench's 16 main cases
        from rasp_programs.catalogue import MAIN_CASE_IDS

        return sorted(MAIN_CASE_IDS, key=int)
    if args.catalogue:  # every built-in case: the 16 and Appendix H's
        from rasp_programs.lookup import builtin_case_ids

        return builtin_case_ids()
    if args.generated is not None:
        return _generated(args.generated, args.generated_seed)
    from zoo.commands.common import resolve_case

    ids = list(dict.fromkeys(part.strip() for part in args.cases.split(",") if part.strip()))
    if not ids:
        raise ZooError(f"--cases: no case ids in {args.cases!r}; expected e.g. 3,4,33")
    for case_id in ids:
        resolve_case("case", case_id)  # unknown -> one line, exit 2, nothing trained
    return ids


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Ray retries an unreachable head for minutes; a plain TCP connect says so in seconds."""
    import socket

    from zoo.errors import ZooError

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        raise ZooError(f"--ray {address}: no Ray head answers there ({type(exc).__name__}: {exc}); "
                       "start one with `ray start --head`, or use --ray local") from None


def _generated(count: int, seed: int) -> list[str]:
    from zoo.errors import ZooError

    if count < 1:
        raise ZooError(f"--generated must be >= 1, got {count}")
    try:
        from rasp_programs.generate import GeneratorConfig
        from rasp_programs.generate_check import generate, kept_names
    except ImportError as exc:
        raise ZooError(f"--generated needs rasp_programs.generate (`zoo generate`), not available: {exc}") from None
    names = list(kept_names(generate(GeneratorConfig(), seed, count)))
    if len(names) < count:
        print(f"zoo: only {len(names)} of {count} generated cases were kept", file=sys.stderr)
    return names


def entry_name(case_id: str) -> str:
    return "case-" + case_id.replace(":", "-")


# ---------------------------------------------------------------------------------------------
# rows of the summary


def summary_row(case_id: str, status: str, *, met: bool | None = None, steps: int | None = None, wall: float | None = None,
         accuracy=None, iia=None, siia=None, siia_all=None, effect=None, error: str | None = None) -> dict[str, Any]:
    r = lambda v: None if v is None else round(float(v), 4)  # noqa: E731
    return {"case": case_id, "status": status, "met_criterion": met, "steps": steps,
            "wall_s": None if wall is None else round(wall, 2), "accuracy": r(accuracy), "iia_min": r(iia),
            "siia_min": r(siia), "siia_all": r(siia_all), "max_out_of_circuit_effect": r(effect), "entry": None, "error": error}


def _skipped_row(case_id: str, entry_dir: Path) -> dict[str, Any]:
    from zoo.artifact import read_entry

    entry = read_entry(entry_dir)
    training, validation = entry.json("training.json") or {}, entry.json("validation.json") or {}
    m = training.get("final_metrics", {})
    return {**summary_row(case_id, "skipped", met=True, steps=training.get("steps"), wall=training.get("wall_time_s"),
                accuracy=m.get("accuracy"), iia=m.get("iia_min"), siia=m.get("siia_min"),
                siia_all=m.get("siia_all"),
                effect=(validation.get("max_out_of_circuit_effect") or {}).get("resample")), "entry": str(entry_dir)}


# ---------------------------------------------------------------------------------------------
# the driver


def run(args: argparse.Namespace, *, job: Callable[[str, dict[str, Any], int], tuple[dict[str, Any], Any]],
        met_criterion: Callable[[Path], bool]) -> int:
    """Run `job(case_id, options, threads) -> (row, entry files or None)` for every named case not
    already in the root with `met_criterion`, in processes or Ray tasks (`job` must be a module-level
    function: it is pickled by reference); install the files, print and write the summary."""
    from zoo.paths import entries_dir, zoo_root

    ids = case_ids(args)
    root = zoo_root(args.root).expanduser().resolve()
    entries = entries_dir(root)
    start = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for case_id in ids:
        if met_criterion(entries / entry_name(case_id)):
            rows[case_id] = _skipped_row(case_id, entries / entry_name(case_id))
        else:
            todo.append(case_id)
    options = {k: getattr(args, k) for k in _OPTIONS} | {"root": str(root)}
    engine = f"ray {args.ray}" if args.ray else "processes"
    if not args.json:
        print(f"training {len(todo)} of {len(ids)} cases ({len(ids) - len(todo)} already met their criterion "
              f"in {entries}) on {engine}", file=sys.stderr)
    jobs = 0
    if todo:
        entries.mkdir(parents=True, exist_ok=True)
        run_cases = _run_ray if args.ray else _run_processes
        jobs = run_cases(todo, options, args, job, lambda row, files: rows.__setitem__(
            row["case"], _install(row, files, entries, met_criterion)))
    ordered = [rows[c] for c in ids if c in rows]
    summary = {"engine": engine, "jobs": jobs, "root": str(root), "cases": len(ids),
               "trained": sum(r["status"] in ("met", "not met") for r in ordered),
               "skipped": sum(r["status"] == "skipped" for r in ordered),
               "failed": [r["case"] for r in ordered if r["status"] in ("not met", "error")],
               "wall_s": round(time.perf_counter() - start, 2), "rows": ordered}
    root.mkdir(parents=True, exist_ok=True)
    (root / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(format_table(ordered))
        print(f"{summary['trained']} trained, {summary['skipped']} skipped, {len(summary['failed'])} failed"
              f"{' (' + ', '.join(summary['failed']) + ')' if summary['failed'] else ''} in "
              f"{summary['wall_s']:.1f} s; summary in {root / SUMMARY_FILE}")
    return 1 if summary["failed"] else 0


def _install(row: dict[str, Any], files: dict[str, bytes] | None, entries: Path, met_criterion) -> dict[str, Any]:
    from zoo.artifact import FAILED_SUFFIX, install_files

    if files is None:
        row["entry"] = None
        return row
    dest = entries / entry_name(row["case"])
    if not row["met_criterion"] and met_criterion(dest):  # never replace an entry that met its criterion
        dest = dest.with_name(dest.name + FAILED_SUFFIX)
    try:
        row["entry"] = str(install_files(files, dest))
    except Exception as exc:  # noqa: BLE001 - one entry that cannot be written does not stop the others
        row.update(status="error", entry=None, error=f"writing {dest}: {type(exc).__name__}: {exc}")
    return row


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _bar(total: int, args: argparse.Namespace):
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="case", desc="zoo train", mininterval=0.25,
                dynamic_ncols=True, disable=None if not args.json else True)


def _report(bar, row: dict[str, Any], running: list[str]) -> None:
    if row["status"] == "error":
        bar.write(f"case {row['case']}: error: {row['error']}", file=sys.stderr)
    elif row["status"] == "not met":
        bar.write(f"case {row['case']}: criterion NOT met after {row['steps']} steps (accuracy {row['accuracy']}, "
                  f"IIA min {row['iia_min']}, SIIA min {row['siia_min']})", file=sys.stderr)
    bar.update(1)
    bar.set_postfix_str("running " + ",".join(running) if running else "", refresh=True)


def _run_processes(todo: list[str], options: dict[str, Any], args: argparse.Namespace, job, done) -> int:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    cores = _cores()
    jobs = min(args.jobs or cores, len(todo))
    threads = args.threads or max(1, cores // jobs)
    parent = os.getpid()
    # spawn, not fork: the parent may hold jax / torch thread pools that fork would copy mid-use
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_watch_parent, initargs=(parent,))
    bar = _bar(len(todo), args)
    try:
        with _sigterm_as_interrupt(_interrupt_workers):
            # one case per worker in flight, the next submitted when one ends: the pool hands its
            # workers up to jobs + 1 cases in advance, which shutdown(cancel_futures) cannot take
            # back, so after an interrupt they were trained to the end while this process waited
            queue, futures = list(todo), {}

            def submit() -> Future:
                case_id = queue.pop(0)
                try:
                    future = pool.submit(_in_worker, job, parent, case_id, options, threads)
                except BrokenProcessPool as exc:  # a worker died: the pool takes nothing more, and
                    future = Future()             # each case left is an error row, as the dead one
                    future.set_exception(exc)
                futures[future] = case_id
                return future

            pending = [submit() for _ in range(jobs)]
            bar.set_postfix_str("running " + ",".join(futures[f] for f in pending), refresh=True)
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                pending = [f for f in pending if f not in finished]
                for future in finished:
                    if queue:
                        pending.append(submit())
                    try:
                        row, files = future.result()
                    except Exception as exc:  # noqa: BLE001 - the worker process itself died
                        row, files = summary_row(futures[future], "error",
                                                 error=f"worker died: {type(exc).__name__}: {exc}"), None
                    done(row, files)
                    _report(bar, row, [futures[f] for f in pending])
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.write(RESUME_HINT, file=sys.stderr)
        raise
    finally:
        bar.close()
        pool.shutdown(wait=True, cancel_futures=True)  # running cases stop at their next step
    return jobs


RESUME_HINT = ("zoo: interrupted; cases that were training stopped at a step and kept their checkpoint: "
               "rerun the same command with --resume to continue them")
PARENT_GRACE_S = 120.0
"""How long a worker whose parent has died may take to stop after it is interrupted (training
checkpoints after its current step, a validation included) before it exits regardless."""


@contextlib.contextmanager
def _sigterm_as_interrupt(before: Callable[[], None]) -> Iterator[None]:
    """SIGTERM (`kill`, a batch scheduler's time limit) ends the run as Ctrl-C does, after
    `before()`, instead of killing this process alone and leaving its workers training with nobody
    to take their entries. Main thread only (signal handlers can be set nowhere else)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        before()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt_workers() -> None:
    """Ctrl-C reaches every process of the terminal's group, a SIGTERM only its target: pass it on
    to the workers as the Ctrl-C they would have had."""
    import multiprocessing

    for child in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGINT)


def _watch_parent(parent: int, poll_s: float = 0.5, grace_s: float = PARENT_GRACE_S) -> None:
    """A worker's initializer: when the parent dies without stopping it (SIGKILL, a crash), the
    worker interrupts itself as Ctrl-C would (training checkpoints and stops) and exits; it does
    not train on for hours with nobody to take the entry."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="zoo-watch-parent", daemon=True).start()


def _in_worker(job: Callable[[str, dict[str, Any], int], Any], parent: int, case_id: str,
               options: dict[str, Any], threads: int) -> Any:
    """Run one queued job unless the parent is gone (then start nothing: a worker takes queued jobs
    after its own one ends), and exit at once after it if the parent died meanwhile."""
    if os.getppid() != parent:
        os._exit(1)
    result = job(case_id, options, threads)
    if os.getppid() != parent:
        os._exit(1)
    return result


def _run_ray(todo: list[str], options: dict[str, Any], args: argparse.Namespace, job, done) -> int:
    from zoo.errors import ZooError

    try:
        import ray
    except ImportError:
        raise ZooError('--ray needs Ray: pip install -e ".[ray]"') from None
    started = not ray.is_initialized()
    if started:
        try:
            if args.ray == "local":
                ray.init(num_cpus=args.jobs or _cores(), include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=args.ray, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - unreachable cluster, bad address: one line, exit 2
            raise ZooError(f"--ray {args.ray}: cannot connect: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    threads = args.threads or 1
    slots = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
    task = ray.remote(num_cpus=threads, max_retries=0)(job)
    refs = {task.remote(case_id, options, threads): case_id for case_id in todo}
    pending = list(refs)
    bar = _bar(len(todo), args)
    bar.set_postfix_str("running " + ",".join(refs[r] for r in pending[:slots]), refresh=True)
    try:
        with _sigterm_as_interrupt(lambda: None):  # the except below cancels the running tasks
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                for ref in finished:
                    try:
                        row, files = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - the task or its node died
                        row, files = summary_row(refs[ref], "error", error=f"ray task failed: {type(exc).__name__}: "
                                                 f"{str(exc).splitlines()[0] if str(exc) else ''}"), None
                    done(row, files)
                    _report(bar, row, [refs[r] for r in pending[:slots]])
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)
        raise
    finally:
        bar.close()
        if started:
            ray.shutdown()
    return min(slots, len(todo))


def format_table(rows: list[dict[str, Any]]) -> str:
    def f(v, spec="") -> str:
        return "-" if v is None else format(v, spec)

    lines = [f"{'case':>12}  {'status':8} {'met':5} {'steps':>6} {'wall s':>7} {'acc':>6} {'IIA':>6} {'SIIA':>6} "
             f"{'out-eff':>7}"]
    for r in rows:
        met = "-" if r["met_criterion"] is None else ("yes" if r["met_criterion"] else "no")
        lines.append(f"{r['case']:>12}  {r['status']:8} {met:5} {f(r['steps']):>6} {f(r['wall_s'], '.1f'):>7} "
                     f"{f(r['accuracy'], '.4f'):>6} {f(r['iia_min'], '.4f'):>6} {f(r['siia_min'], '.4f'):>6} "
                     f"{f(r['max_out_of_circuit_effect'], '.4f'):>7}"
                     + (f"  {r['error']}" if r.get("error") else ""))
    return "\n".join(lines)
