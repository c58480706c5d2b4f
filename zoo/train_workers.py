"""Cases + one job -> the job run for each case in worker processes on this machine (`--jobs`,
default one per core) or as Ray tasks on a cluster (`--ray ADDRESS`; `local` starts a Ray instance
here); results are handed back one by one as they finish. Ray is the scheduler there; nothing here
schedules. Every worker trains on the options' thread count (zoo.train_entry.TRAIN_THREADS unless
--threads), whatever the number of jobs: an entry's weights do not depend on --jobs.

Ctrl-C or SIGTERM stops every worker after its running step (checkpoints kept: `--resume` continues
them); a worker whose parent died outright interrupts itself the same way instead of training on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from zoo.train_summary import summary_row

_RAY_ADDRESS = re.compile(r"(auto|local|(ray://)?[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5})")


@dataclasses.dataclass(frozen=True)
class Engine:
    """Where the cases run: `jobs` worker processes (None: one per core), or Ray at `ray`."""

    jobs: int | None = None
    ray: str | None = None
    quiet: bool = False
    """No progress bar (--json)."""

    @property
    def name(self) -> str:
        return f"ray {self.ray}" if self.ray else "processes"


def check_engine(engine: Engine) -> None:
    """Bad --jobs or --ray is a one-line ZooError before any case runs."""
    from zoo.errors import ZooError

    if engine.jobs is not None and engine.jobs < 1:
        raise ZooError(f"--jobs must be >= 1, got {engine.jobs}")
    if engine.ray is not None and not _RAY_ADDRESS.fullmatch(engine.ray):
        raise ZooError(f"--ray: bad address {engine.ray!r}; expected HOST:PORT, ray://HOST:PORT, auto or local")
    if engine.ray not in (None, "auto", "local"):
        _check_reachable(engine.ray)


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


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _bar(total: int, quiet: bool):
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="case", desc="zoo train", mininterval=0.25,
                dynamic_ncols=True, disable=True if quiet else None)


def _report(bar, row: dict[str, Any], running: list[str]) -> None:
    if row["status"] == "error":
        bar.write(f"case {row['case']}: error: {row['error']}", file=sys.stderr)
    elif row["status"] == "not met":
        bar.write(f"case {row['case']}: criterion NOT met after {row['steps']} steps (accuracy {row['accuracy']}, "
                  f"IIA min {row['iia_min']}, SIIA min {row['siia_min']})", file=sys.stderr)
    bar.update(1)
    bar.set_postfix_str("running " + ",".join(running) if running else "", refresh=True)


def run_processes(todo: list[str], options: Any, engine: Engine, job, done) -> int:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    n_cores = cores()
    jobs = min(engine.jobs or n_cores, len(todo))  # each worker trains on options.threads torch threads
    parent = os.getpid()
    # spawn, not fork: the parent may hold jax / torch thread pools that fork would copy mid-use
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=watch_parent, initargs=(parent,))
    bar = _bar(len(todo), engine.quiet)
    try:
        with sigterm_as_interrupt(interrupt_workers):
            # one case per worker in flight, the next submitted when one ends: the pool hands its
            # workers up to jobs + 1 cases in advance, which shutdown(cancel_futures) cannot take
            # back, so after an interrupt they were trained to the end while this process waited
            queue, futures = list(todo), {}

            def submit() -> Future:
                case_id = queue.pop(0)
                try:
                    future = pool.submit(_in_worker, job, parent, case_id, options)
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
def sigterm_as_interrupt(before: Callable[[], None]) -> Iterator[None]:
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


def interrupt_workers() -> None:
    """Ctrl-C reaches every process of the terminal's group, a SIGTERM only its target: pass it on
    to the workers as the Ctrl-C they would have had."""
    import multiprocessing

    for child in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGINT)


def watch_parent(parent: int, poll_s: float = 0.5, grace_s: float = PARENT_GRACE_S) -> None:
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


def _in_worker(job: Callable[[str, Any], Any], parent: int, case_id: str, options: Any) -> Any:
    """Run one queued job unless the parent is gone (then start nothing: a worker takes queued jobs
    after its own one ends), and exit at once after it if the parent died meanwhile."""
    if os.getppid() != parent:
        os._exit(1)
    result = job(case_id, options)
    if os.getppid() != parent:
        os._exit(1)
    return result


def run_ray(todo: list[str], options: Any, engine: Engine, job, done) -> int:
    from zoo.errors import ZooError

    try:
        import ray
    except ImportError:
        raise ZooError('--ray needs Ray: pip install -e ".[ray]"') from None
    started = not ray.is_initialized()
    if started:
        try:
            if engine.ray == "local":
                ray.init(num_cpus=engine.jobs or cores(), include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=engine.ray, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - unreachable cluster, bad address: one line, exit 2
            raise ZooError(f"--ray {engine.ray}: cannot connect: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    threads = options.threads
    slots = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
    task = ray.remote(num_cpus=threads, max_retries=0)(job)
    refs = {task.remote(case_id, options): case_id for case_id in todo}
    pending = list(refs)
    bar = _bar(len(todo), engine.quiet)
    bar.set_postfix_str("running " + ",".join(refs[r] for r in pending[:slots]), refresh=True)
    try:
        with sigterm_as_interrupt(lambda: None):  # the except below cancels the running tasks
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
