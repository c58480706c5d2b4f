"""`zoo train --all` / `--catalogue` / `--cases 3,4` / `--generated N`: the named cases -> their entries,
each trained in its own worker (zoo.train_workers: processes here, or Ray tasks on a cluster).

A worker compiles, trains, validates and returns the entry's files as bytes (so Ray workers on
other nodes need no shared disk); this process installs them under <root>/entries (a run that
missed its criterion never replaces an entry that met it: `case-N.failed/`). Entries already in the
root with met_criterion are skipped, so a killed run rerun trains only what is missing. A failed
case (criterion not met, or an error) is a row of the summary and does not stop the others. The
summary is written to <root>/train-all-summary.json and returned (the CLI prints it).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.train_entry import TrainOptions, met_criterion as entry_met_criterion, train_case_job
from zoo.train_summary import skipped_row
from zoo.train_workers import Engine, run_processes, run_ray

SUMMARY_FILE = "train-all-summary.json"


@dataclasses.dataclass(frozen=True)
class CaseSelection:
    """Which cases a many-case run trains: exactly one of the fields is set."""

    all: bool = False
    """InterpBench's 16 main cases."""
    catalogue: bool = False
    """Every built-in case: the 16 and Appendix H's."""
    cases: str | None = None
    """Comma-separated case ids, e.g. "3,4,33"."""
    generated: int | None = None
    """This many cases from `zoo generate` (default settings), drawn with generated_seed."""
    generated_seed: int = 0

    def given(self) -> list[str]:
        """The command-line flags that set this selection."""
        return [flag for flag, on in (("--all", self.all), ("--catalogue", self.catalogue), ("--cases", self.cases),
                                      ("--generated", self.generated is not None)) if on]


def case_ids(selection: CaseSelection) -> list[str]:
    """The cases named by the selection, checked; a one-line ZooError otherwise."""
    from zoo.errors import ZooError

    if selection.all:  # InterpBench's 16 main cases
        from rasp_programs.catalogue import MAIN_CASE_IDS

        return sorted(MAIN_CASE_IDS, key=int)
    if selection.catalogue:  # every built-in case: the 16 and Appendix H's
        from rasp_programs.lookup import builtin_case_ids

        return builtin_case_ids()
    if selection.generated is not None:
        return _generated(selection.generated, selection.generated_seed)
    from zoo.high_level_source import resolve_case

    cases = selection.cases or ""
    ids = list(dict.fromkeys(part.strip() for part in cases.split(",") if part.strip()))
    if not ids:
        raise ZooError(f"--cases: no case ids in {cases!r}; expected e.g. 3,4,33")
    for case_id in ids:
        resolve_case("case", case_id)  # unknown -> one line, exit 2, nothing trained
    return ids


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


def train_many(ids: list[str], options: TrainOptions, engine: Engine, *,
               job: Callable[[str, TrainOptions], tuple[dict[str, Any], Any]] = train_case_job,
               met_criterion: Callable[[Path], bool] = entry_met_criterion) -> dict[str, Any]:
    """Run `job(case_id, options) -> (row, entry files or None)` for every case of `ids` not
    already in the root with `met_criterion`, on the engine (`job` must be a module-level function:
    it is pickled by reference); install the files, write and return the summary."""
    from zoo.paths import entries_dir, zoo_root

    root = zoo_root(options.root).expanduser().resolve()
    options = dataclasses.replace(options, root=str(root))
    entries = entries_dir(root)
    start = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for case_id in ids:
        if met_criterion(entries / entry_name(case_id)):
            rows[case_id] = skipped_row(case_id, entries / entry_name(case_id))
        else:
            todo.append(case_id)
    if not engine.quiet:
        print(f"training {len(todo)} of {len(ids)} cases ({len(ids) - len(todo)} already met their criterion "
              f"in {entries}) on {engine.name}", file=sys.stderr)
    jobs = 0
    if todo:
        entries.mkdir(parents=True, exist_ok=True)
        run_cases = run_ray if engine.ray else run_processes
        jobs = run_cases(todo, options, engine, job, lambda row, files: rows.__setitem__(
            row["case"], _install(row, files, entries, met_criterion)))
    ordered = [rows[c] for c in ids if c in rows]
    summary = {"engine": engine.name, "jobs": jobs, "root": str(root), "cases": len(ids),
               "trained": sum(r["status"] in ("met", "not met") for r in ordered),
               "skipped": sum(r["status"] == "skipped" for r in ordered),
               "failed": [r["case"] for r in ordered if r["status"] in ("not met", "error")],
               "wall_s": round(time.perf_counter() - start, 2), "rows": ordered}
    root.mkdir(parents=True, exist_ok=True)
    (root / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


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


