"""Methods × entries -> one scored cell per (method, entry, seed), each cached as a JSON file: the
run behind `zoo bench` (the leaderboard is eval.leaderboard.table).

A cell's file is `<cache>/<method>/<entry>.<model>.seed<N>.json` and records the key it was
computed under: a sha256 of the entry's fingerprint (its files' sums), the method's fingerprint
(its module's source and its options' defaults, or the score file's bytes), the scoring code's
source (SCORER_MODULES) and every evaluation setting. A file whose key differs is stale and
recomputed; a missing one is computed; the rest are read back, so a bench that was interrupted
(Ctrl-C, a killed process) and rerun computes only what is missing. Files are written whole and
renamed into place: an interrupted write leaves none.
Entries are loaded lazily (only if one of their cells is missing) and once each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from eval.core.device import move_model
from eval.evaluator.evaluate import RunProgress, Settings, Target, evaluate
from eval.methods.options import with_options
from eval.methods.interface import Method, MethodError, get_method
from eval.evaluator.report import MethodResult
from eval.evaluator.score_files import file_stem
from eval.leaderboard.fingerprints import method_fingerprint, scorer_fingerprint
from eval.methods.score_input import ScoreFileError, read_score_file

CELL_SCHEMA = "zoo-bench-cell/1"
"""Bumped whenever a cell's fields or their meaning change (older files then count as stale)."""
MethodSource = Literal["builtin", "outside", "scores"]
CellStatus = Literal["ok", "missing", "error"]
EdgeLabels = Literal["exact", "not exact", "not measured"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchEntry:
    """One entry of the bench, not yet loaded."""

    name: str
    """Entry name, e.g. `case-3` or `planted-ioi`."""
    model: Literal["trained", "compiled"]
    """Which model of the entry is scored."""
    fingerprint: str
    """sha256 that changes whenever the entry's model or ground truth does (its files' sums)."""
    load: Callable[[], Target]
    """Builds the Target (model, ground truth, task); called only if a cell must be computed."""
    family: str = ""
    """The group the leaderboard also reports apart: a failure-mode family (e.g. `cancellation`),
    `planted` or `case`; empty: none."""
    corruption: str = "resample"
    """The entry's own counterfactuals (its case's `corruption`): what its cells use unless
    BenchSettings.corruption names another."""
    edge_labels: EdgeLabels = "not measured"
    """Whether patching confirms the entry's edge labels (its validation.json: `edge_bounds`, else
    `edge_effects`): `not exact` where a non-circuit edge moves more than the bound, so its edge
    AUROCs score methods partly against labels that are not ground truth at edge level."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchMethod:
    """One column of the leaderboard: a method to run, or a folder of precomputed score files."""

    key: str
    """Leaderboard name: the registry key, `package.module:function`, or `scores:<folder name>`."""
    source: MethodSource
    """Built-in, an outside function, or score files."""
    method: Method | None = None
    """The method to run (None for score files)."""
    scores: Path | None = None
    """Folder holding `<entry>.json` (a MIB score file) or `<entry>/` (MIB circuit files) per entry."""
    fingerprint: str = ""
    """sha256 of the method's module source and option defaults ("" for score files: their bytes
    enter each cell's key instead)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchSettings:
    """What every cell is evaluated with (each field enters the cache key)."""

    seed: int = 0
    """Seed of the task data and of seeded methods."""
    n: int = 100
    """Clean inputs (and as many counterfactuals) per cell."""
    ablation: Literal["resample", "mean", "zero"] = "resample"
    """How patched or ablated components are replaced."""
    stability_seeds: int = 1
    """Runs per method for CAUSAL-BENCH stability (1: off; the leaderboard does not use it)."""
    chance_draws: int = 200
    """Monte-Carlo draws of circuit methods' chance lines."""
    threads: int = 1
    """torch CPU threads the cells are computed with (float results and wall times depend on it;
    one thread gives the same numbers on every machine and does not stall beside a busy core)."""

    device: str = "cpu"
    """torch device the models run on (`cpu`, `cuda:N`): float results depend on it too."""
    corruption: str | None = None
    """How every cell's counterfactuals are made (`resample`, `token:K`: eval.core.corruption);
    None: each entry's own (BenchEntry.corruption)."""

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")

    def evaluation(self, entry: BenchEntry) -> Settings:
        """The evaluator's settings for one entry's cells."""
        return Settings(n=self.n, seed=self.seed, ablation=self.ablation, stability_seeds=self.stability_seeds,
                        chance_draws=self.chance_draws, permutations=1, corruption=self.corruption_for(entry))

    def corruption_for(self, entry: BenchEntry) -> str:
        """The corruption an entry's cells use: these settings' own, else the entry's."""
        return self.corruption or entry.corruption


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cell:
    """One method on one entry: what the leaderboard needs from its EvalReport."""

    method: str
    """BenchMethod.key."""
    entry: str
    """BenchEntry.name."""
    model: Literal["trained", "compiled"]
    """Which model of the entry."""
    seed: int
    """BenchSettings.seed."""
    status: CellStatus
    """`ok`; `missing` (a score folder without a file for this entry); `error` (see message)."""
    kind: Literal["scores", "circuits"] | None = None
    """Whether the method scored or returned circuits."""
    node_auroc: float | None = None
    """Node AUROC (circuit methods: pessimistic)."""
    edge_auroc: float | None = None
    """Head-level edge AUROC (circuit methods: pessimistic)."""
    node_chance: float | None = None
    """The node AUROC's chance line (eval.scoring.chance)."""
    edge_chance: float | None = None
    """The edge AUROC's chance line."""
    qkv_edge_auroc: float | None = None
    """q/k/v-level edge AUROC (scorers only; eval report's `qkv_edge`)."""
    qkv_edge_chance: float | None = None
    """Its chance line."""
    node_f1: float | None = None
    """F1 of the identified node set."""
    edge_f1: float | None = None
    """F1 of the identified edges (threshold set, or the chosen circuit's edges)."""
    cpr: float | None = None
    """MIB CPR on the q/k/v graph (scorers only)."""
    cmd: float | None = None
    """MIB CMD on the q/k/v graph (scorers only)."""
    seconds: float | None = None
    """Wall time of the method's run(s) on this entry."""
    inert_edges: tuple[str, ...] = ()
    """Ground-truth edges no counterfactual of the task moves (eval report's `inert`)."""
    message: str = ""
    """Why the cell is missing or failed (one line)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchRun:
    """Every cell of a bench run, and how many were computed now or read from the cache."""

    cells: tuple[Cell, ...]
    """Entries outer, methods inner, in the order given."""
    computed: int
    """Cells computed in this run."""
    reused: int
    """Cells read back from the cache."""
    settings: BenchSettings
    """The settings every cell was evaluated with."""


def bench_method(spec: str, registry: Any, options: Mapping[str, Any] | None = None) -> BenchMethod:
    """A built-in key or `package.module:function`, with these fields of its options changed
    (eval.methods.options) -> a BenchMethod (one-line MethodError otherwise). Changed options show
    in its key, `acdc[taus=0,0.1]`, so its leaderboard row and cached cells stay apart from the
    defaults'."""
    method = get_method(spec, registry)
    key = method.key
    if options:
        method = with_options(method, options)
        key += "[" + ";".join(f"{field}={value}" for field, value in options.items()) + "]"
    return BenchMethod(key=key, source="builtin" if spec in registry else "outside", method=method,
                       fingerprint=method_fingerprint(method))


def score_folder(path: str | Path) -> BenchMethod:
    """A folder of per-entry score files -> a BenchMethod named `scores:<folder name>`."""
    folder = Path(path)
    if not folder.is_dir():
        raise MethodError(f"score folder {str(folder)!r} is not a directory (it holds <entry>.json files "
                          "or <entry>/ circuit folders)")
    return BenchMethod(key=f"scores:{folder.resolve().name}", source="scores", scores=folder)


def _score_path(method: BenchMethod, entry: str) -> Path | None:
    assert method.scores is not None
    for path in (method.scores / f"{entry}.json", method.scores / entry):
        if path.exists():
            return path
    return None


def _tree_sha(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        try:  # read as the evaluation will: a FIFO or an oversized file is one line, never a hang
            h.update(hashlib.sha256(read_score_file(f, f"score file {str(f)!r}")).digest())
        except ScoreFileError as exc:
            raise MethodError(str(exc)) from None
    return h.hexdigest()


def cell_key(entry: BenchEntry, method: BenchMethod, settings: BenchSettings, score_path: Path | None = None,
             scorer: str = "") -> str:
    """The cache key of one cell: anything that can change its numbers."""
    parts = {"schema": CELL_SCHEMA, "scorer": scorer, "entry": entry.name, "model": entry.model,
             "entry_sha": entry.fingerprint,
             "method": method.key, "method_sha": method.fingerprint,
             "scores_sha": _tree_sha(score_path) if score_path is not None else None,
             "settings": _key_settings(settings)}
    if (corruption := settings.corruption_for(entry)) != "resample":  # resample: cells cached before it existed
        parts["corruption"] = corruption
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _key_settings(settings: BenchSettings) -> dict[str, Any]:
    """The settings as the key holds them; the CPU, the device before there was a choice, is left
    out, so cells cached before it existed stay valid."""
    fields = dataclasses.asdict(settings)
    if fields["device"] == "cpu":
        del fields["device"]
    del fields["corruption"]  # the key holds the entry's effective one (cell_key)
    return fields


def cell_path(cache: Path, method: BenchMethod, entry: BenchEntry, seed: int) -> Path:
    return cache / file_stem(method.key) / f"{entry.name}.{entry.model}.seed{seed}.json"


def _read_cell(path: Path, key: str) -> Cell | None:
    """The cached cell if its file is whole and was computed under `key`, else None."""
    try:
        data = json.loads(path.read_text())
        if data.get("schema") != CELL_SCHEMA or data.get("key") != key:
            return None
        fields = dict(data["cell"])
        fields["inert_edges"] = tuple(fields.get("inert_edges", ()))
        return Cell(**fields)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cell(path: Path, key: str, cell: Cell) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two benches sharing a cache never share a temp file
    tmp.write_text(json.dumps({"schema": CELL_SCHEMA, "key": key, "cell": dataclasses.asdict(cell)}, indent=1,
                              allow_nan=False))
    os.replace(tmp, path)  # whole or absent: an interrupted bench never reads half a cell


def _finite(x: float | None) -> float | None:
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)


def cell_from_result(r: MethodResult, *, method: str, entry: BenchEntry, seed: int,
                     inert: Sequence[str] = ()) -> Cell:
    """The leaderboard's numbers out of one MethodResult."""
    return Cell(method=method, entry=entry.name, model=entry.model, seed=seed, status="ok", kind=r.kind,
                node_auroc=_finite(r.node.auroc), edge_auroc=_finite(r.edge.auroc),
                node_chance=_finite(r.node.chance), edge_chance=_finite(r.edge.chance),
                qkv_edge_auroc=_finite(r.qkv_edge.auroc) if r.qkv_edge else None,
                qkv_edge_chance=_finite(r.qkv_edge.chance) if r.qkv_edge else None,
                node_f1=_finite(r.node.at_threshold.f1), edge_f1=_finite(r.edge.at_threshold.f1),
                cpr=_finite(r.mib.cpr) if r.mib else None, cmd=_finite(r.mib.cmd) if r.mib else None,
                seconds=r.seconds, inert_edges=tuple(inert))


def run_bench(entries: Sequence[BenchEntry], methods: Sequence[BenchMethod], settings: BenchSettings,
              cache: str | Path, *, progress: Callable[[Cell, bool], None] | None = None,
              runs: RunProgress | None = None, done: Mapping[tuple[str, str], Cell] | None = None) -> BenchRun:
    """Every method on every entry, from the cache where its key matches, on settings.threads
    torch threads. `progress(cell, cached)` is called once per cell, `runs` as each method run of
    a computed cell begins (eval.evaluate). A method's failure on an entry is an `error` cell, not
    the end of the run; Ctrl-C ends it, leaving the finished cells cached. `done`: (method key, entry
    name) -> a cell computed elsewhere in this run (`zoo bench --jobs`' workers), counted as computed."""
    cache = Path(cache)
    scorer = scorer_fingerprint()
    with _torch_threads(settings.threads):
        return _run(entries, methods, settings, cache, scorer, progress, runs, done or {})


def cached_cell(entry: BenchEntry, method: BenchMethod, settings: BenchSettings, cache: str | Path) -> Cell | None:
    """The cell's cached result under its current key, or None where it must be computed (a score
    folder without this entry's file is neither: run_bench reports it missing without computing)."""
    if method.source == "scores" and _score_path(method, entry.name) is None:
        return Cell(method=method.key, entry=entry.name, model=entry.model, seed=settings.seed, status="missing")
    score_path = _score_path(method, entry.name) if method.source == "scores" else None
    key = cell_key(entry, method, settings, score_path, scorer_fingerprint())
    return _read_cell(cell_path(Path(cache), method, entry, settings.seed), key)


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's CPU thread count for the block, the caller's restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run(entries: Sequence[BenchEntry], methods: Sequence[BenchMethod], settings: BenchSettings, cache: Path,
         scorer: str, progress: Callable[[Cell, bool], None] | None, runs: RunProgress | None,
         done: Mapping[tuple[str, str], Cell]) -> BenchRun:
    cells: list[Cell] = []
    computed = reused = 0
    for entry in entries:
        target: Target | None = None
        load_error = ""
        for method in methods:
            if (method.key, entry.name) in done:
                computed += 1
                cells.append(done[(method.key, entry.name)])
                continue
            score_path = _score_path(method, entry.name) if method.source == "scores" else None
            if method.source == "scores" and score_path is None:
                cell = Cell(method=method.key, entry=entry.name, model=entry.model, seed=settings.seed,
                            status="missing", message=f"no {entry.name}.json or {entry.name}/ in {method.scores}")
                cells.append(cell)
                if progress:
                    progress(cell, True)
                continue
            key = cell_key(entry, method, settings, score_path, scorer)
            path = cell_path(cache, method, entry, settings.seed)
            cell = _read_cell(path, key)
            if cell is not None:
                reused += 1
                cells.append(cell)
                if progress:
                    progress(cell, True)
                continue
            if target is None and not load_error:
                try:
                    target = entry.load()
                    target = dataclasses.replace(target, model=move_model(target.model, settings.device))
                except (ValueError, OSError, MethodError) as exc:
                    load_error = f"cannot load {entry.name}: {exc}"
            cell = _compute(entry, method, settings, target, score_path, runs) if target is not None else Cell(
                method=method.key, entry=entry.name, model=entry.model, seed=settings.seed, status="error",
                message=load_error)
            if cell.status == "ok":
                _write_cell(path, key, cell)
            computed += 1
            cells.append(cell)
            if progress:
                progress(cell, False)
    return BenchRun(cells=tuple(cells), computed=computed, reused=reused, settings=settings)


def _compute(entry: BenchEntry, method: BenchMethod, settings: BenchSettings, target: Target,
             score_path: Path | None, runs: RunProgress | None) -> Cell:
    try:
        if method.source == "scores":
            report = evaluate(target, (), scores=[score_path], settings=settings.evaluation(entry))
        else:
            report = evaluate(target, [method.method], settings=settings.evaluation(entry), progress=runs)
    except (MethodError, ValueError) as exc:
        text = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        return Cell(method=method.key, entry=entry.name, model=entry.model, seed=settings.seed, status="error",
                    message=text)
    return cell_from_result(report.methods[0], method=method.key, entry=entry, seed=settings.seed,
                            inert=report.inert.qkv_edges)

