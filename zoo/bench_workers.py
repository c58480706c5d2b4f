"""`zoo bench --jobs J`: the cells the cache lacks, computed in J worker processes -> the same cells,
cached as a one-process bench caches them, for eval.leaderboard.cells.run_bench to put on the board.

Each cell is one (method, entry) evaluation with its own seeds and torch threads (BenchSettings), so a
cell's numbers do not depend on J or on which worker ran it; only the wall time does. A worker rebuilds
its cell's entry (a trained entry from its folder, a compiled one from its case id) and its method (a
registry key with its options, `package.module:function`, or a score folder) from names: entries
and methods hold functions that do not cross a process boundary. Workers are spawned, not forked
(the parent may hold jax / torch thread pools that fork would copy mid-use). Ctrl-C stops every
worker; the finished cells stay cached, as in a one-process bench.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class CellJob:
    """One cell to compute, by names a worker can rebuild it from."""

    root: str
    """The zoo root."""
    entry: str
    """BenchEntry.name."""
    model: str
    """BenchEntry.model: `trained` or `compiled`."""
    case: str | None
    """The case id a compiled entry is built from (None for a trained entry, built from its folder)."""
    ablation: str
    """How the entry's edge labels are judged (bench_entries' ablation)."""
    method: tuple[str, Any]
    """("method", (spec, options or None)) or ("scores", folder)."""
    key: str
    """The method's BenchMethod.key (an error cell's, should the worker die)."""
    settings: Any
    """eval.leaderboard.cells.BenchSettings."""
    cache: str
    """The cell cache folder."""


def compute_cells(jobs: Sequence[CellJob], workers: int, on_done: Callable[[Any], None]) -> dict[tuple[str, str], Any]:
    """(method key, entry name) -> the Cell of every job, computed in `workers` processes; on_done(cell)
    as each finishes. One job per worker in flight, the next submitted as one ends (a pool handed more
    in advance would compute them after a Ctrl-C); Ctrl-C and SIGTERM interrupt the workers, as
    zoo.train_workers does, and a worker whose parent died stops itself."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from zoo.train_workers import interrupt_workers, sigterm_as_interrupt, watch_parent

    out: dict[tuple[str, str], Any] = {}
    queue = list(jobs)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=watch_parent, initargs=(os.getpid(),))
    try:
        with sigterm_as_interrupt(interrupt_workers):
            running = {}
            for _ in range(min(workers, len(queue))):
                job = queue.pop(0)
                running[pool.submit(run_job, job)] = job
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = running.pop(future)
                    if queue:
                        nxt = queue.pop(0)
                        running[pool.submit(run_job, nxt)] = nxt
                    cell = _result(future, job)
                    out[(cell.method, cell.entry)] = cell
                    on_done(cell)
    except KeyboardInterrupt:
        interrupt_workers()  # a SIGINT sent to this process alone reaches no worker otherwise
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # the running cells stop at their interrupt
    return out


def _result(future: Any, job: CellJob) -> Any:
    """The job's Cell, or an error cell where its worker died (killed, out of memory) under it."""
    from eval.leaderboard.cells import Cell

    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - the worker process itself died
        return Cell(method=job.key, entry=job.entry, model=job.model, seed=job.settings.seed, status="error",
                    message=f"worker died: {type(exc).__name__}: {exc}")


def run_job(job: CellJob) -> Any:
    """The worker's side: rebuild the entry and the method, compute (or read) the cell, cache it."""
    from eval.leaderboard.cells import run_bench

    with contextlib.redirect_stdout(sys.stderr):  # a method's prints must not reach the parent's --json
        entry, method = _entry(job), _method(job.method)
        return run_bench([entry], [method], job.settings, job.cache).cells[0]


def _entry(job: CellJob) -> Any:
    from zoo.leaderboard_entries import bench_entries

    root = Path(job.root)
    if job.case is not None:
        (entry,) = bench_entries(root, cases=[job.case], model="compiled", ablation=job.ablation)
        return entry
    from zoo.leaderboard_entries import bench_entry_of
    from zoo.paths import entries_dir

    return bench_entry_of(entries_dir(root) / job.entry, root, job.ablation)


def _method(spec: tuple[str, Any]) -> Any:
    from eval.leaderboard.cells import bench_method, score_folder
    from eval.methods.registry import REGISTRY

    kind, value = spec
    if kind == "scores":
        return score_folder(value)
    key, options = value
    return bench_method(key, REGISTRY, options)


def jobs_for(entries: Sequence[Any], methods: Sequence[Any], specs: Sequence[tuple[str, Any]],
             cases: Mapping[str, str], *, root: Path, ablation: str, settings: Any, cache: Path) -> list[CellJob]:
    """A CellJob for every (entry, method) cell the cache lacks, entries outer; specs[i] rebuilds
    methods[i], cases maps a compiled entry's name to its case id."""
    from eval.leaderboard.cells import cached_cell

    return [CellJob(root=str(root), entry=e.name, model=e.model, case=cases.get(e.name) if e.model == "compiled"
                    else None, ablation=ablation, method=spec, key=m.key, settings=settings, cache=str(cache))
            for e in entries for m, spec in zip(methods, specs) if cached_cell(e, m, settings, cache) is None]
