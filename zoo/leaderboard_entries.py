"""A zoo root + `--cases` / `--planted` -> the entries `zoo bench` scores (eval.leaderboard.cells.BenchEntry):
every entry under `<root>/entries` by default, or the named ones.

A trained entry's fingerprint is the sha256 of its manifest (which holds the sum of every file),
so retraining or revalidating it invalidates its cached cells. A compiled model's is the sha256 of
its weights and of the ground truth read off them (the graph rule may change without the weights).
Planted entries are folders `planted-NAME` in the same place (zoo.artifact.ENTRY_NAME).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from zoo.artifact import ENTRY_NAME, MANIFEST
from zoo.errors import ZooError

ModelChoice = Literal["auto", "trained", "compiled"]


def bench_entries(root: Path, *, cases: Sequence[str] = (), planted: Sequence[str] = (),
                  model: ModelChoice = "auto", ablation: str = "resample") -> list[Any]:
    """The BenchEntry list, or a one-line ZooError naming what is missing and what exists; each
    entry's edge labels judged under `ablation`, the one the methods will patch with."""
    from zoo.paths import entries_dir

    where = entries_dir(root)
    found = sorted(p.name for p in where.iterdir() if p.is_dir() and ENTRY_NAME.fullmatch(p.name)) \
        if where.is_dir() else []
    out = []
    if planted:
        have = [n for n in found if n.startswith("planted-")]
        for name in planted:
            if f"planted-{name}" not in have:
                raise ZooError(f"no planted entry planted-{name} under {where} (planted entries there: "
                               f"{', '.join(have) or 'none'})")
            out.append(bench_entry_of(where / f"planted-{name}", root, ablation))
    for case_id in cases:
        out.append(_case_entry(case_id, root, model, ablation))
    if not cases and not planted:
        if not found:
            raise ZooError(f"no entries under {where}: train some (`zoo train --all`) or name cases with "
                           "--cases 3,4 (their compiled models are scored)")
        for name in found:
            if name.startswith("case-") and model == "compiled":
                out.append(_case_entry(name[len("case-"):], root, model, ablation))
            elif model != "compiled":
                out.append(bench_entry_of(where / name, root, ablation))
    return out


def _case_entry(case_id: str, root: Path, model: ModelChoice, ablation: str) -> Any:
    from rasp_programs.case import CaseError
    from rasp_programs.lookup import get_case
    from zoo.paths import entries_dir

    try:
        case = get_case(case_id)
    except CaseError as exc:
        raise ZooError(str(exc)) from None
    trained = entries_dir(root) / case.entry_name
    if model == "trained" and not trained.is_dir():
        raise ZooError(f"no trained entry {case.entry_name} under {entries_dir(root)}; train it first or use "
                       "--model compiled")
    if model != "compiled" and trained.is_dir():
        return bench_entry_of(trained, root, ablation)
    return _compiled(case, root)


def bench_entry_of(path: Path, root: Path, ablation: str) -> Any:
    """The BenchEntry of the trained entry folder `path` (bench_entries' and a `zoo bench --jobs` worker's)."""
    from eval.leaderboard.cells import BenchEntry

    try:
        fingerprint = hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest()
    except OSError:
        raise ZooError(f"entry {path} has no readable {MANIFEST}; rerun `zoo train` or `zoo pull` for it") from None

    def load() -> Any:
        from zoo.entry import load_entry_dir
        from zoo.targets import resolve_target

        return _one_line(lambda: resolve_target(load_entry_dir(path), "trained", root))

    task = _planted_task(path.name)
    return BenchEntry(name=path.name, model="trained", fingerprint=fingerprint, load=load,
                      family=_family(path.name, task), corruption=task.case.corruption if task else "resample",
                      edge_labels=edge_labels(path, ablation))


def edge_labels(path: Path, ablation: str = "resample") -> str:
    """Whether patching under `ablation` confirms the edge labels of the entry in `path`
    (eval.leaderboard.cells.EdgeLabels): its validation.json's per-length `edge_bounds` where they
    measured that ablation (resample, and mean since 2026-11-29), else its padded `edge_effects`
    (resample); `not measured` where neither did (an older entry, a model too large to patch, zero
    ablation)."""
    try:
        validation = json.loads((path / "validation.json").read_text())
    except (OSError, ValueError):
        return "not measured"
    if not isinstance(validation, dict):
        return "not measured"
    bounds, pooled = validation.get("edge_bounds"), validation.get("edge_effects")
    if _usable(bounds) and ablation in (bounds.get("ablations") or [bounds.get("ablation", "resample")]):
        if bounds.get("ablations") is None:  # one ablation measured: the section's verdict is its
            return "exact" if bounds["exact"] else "not exact"
        cells = [c.get(ablation) for by_shape in (bounds.get("by_length") or {}).values() for c in by_shape.values()]
        if cells and all(isinstance(c, dict) and isinstance(c.get("effect"), (int, float)) for c in cells):
            return "exact" if all(c["effect"] <= bounds.get("bound", 0.01) for c in cells) else "not exact"
    if _usable(pooled) and ablation == "resample":
        return "exact" if pooled["exact"] else "not exact"
    return "not measured"


def _usable(section: Any) -> bool:
    return isinstance(section, dict) and not section.get("skipped") and isinstance(section.get("exact"), bool)


def entry_family(name: str) -> str:
    """The leaderboard group of an entry folder: a planted model's failure-mode family, a multi-task
    view's bundle (e.g. `mt-2x4`), else `planted`; a case's is `case`."""
    return _family(name, _planted_task(name))


def _family(name: str, task: Any) -> str:
    if not name.startswith("planted-"):
        return "case"
    bundle = getattr(task, "bundle", None)  # a multi-task view: its bundle's views are reported together
    return (task.failure_mode if task is not None else None) or getattr(bundle, "name", None) or "planted"


def _planted_task(name: str) -> Any:
    """The PlantedTask of a `planted-<name>` entry folder, or None (a case, or a name no longer known)."""
    if not name.startswith("planted-"):
        return None
    from planted import get_planted
    from rasp_programs.case import CaseError

    try:
        return get_planted(name[len("planted-"):])
    except CaseError:
        return None


def _compiled(case: Any, root: Path) -> Any:
    from eval.leaderboard.cells import BenchEntry
    from rasp_programs.compile import compile_case
    from zoo.paths import compiled_dir
    from zoo.targets import resolve_target

    try:
        compiled = _one_line(lambda: compile_case(case, compiled_dir(root)))
    except ValueError as exc:
        raise ZooError(f"case {case.id} does not compile: {exc}") from None
    h = hashlib.sha256()
    for name in sorted(compiled.state_dict):
        h.update(name.encode())
        h.update(compiled.state_dict[name].detach().cpu().numpy().tobytes())
    h.update(json.dumps(compiled.graph.promoted().to_json(), sort_keys=True).encode())
    return BenchEntry(name=case.entry_name, model="compiled", fingerprint=h.hexdigest(),
                      load=lambda: resolve_target(compiled, "compiled", root), family="case")


def _one_line(build: Any) -> Any:
    """build(), with any failure turned into one ValueError line (a bench cell's error, not a traceback)."""
    try:
        return build()
    except ZooError as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - an entry that cannot be built becomes its cells' one-line error
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"{type(exc).__name__}: {first}") from None
