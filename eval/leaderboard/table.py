"""A bench run's cells -> the leaderboard: per method the mean ± sd over entries of node and edge
AUROC (beside their chance lines), F1, CPR, CMD and wall time, and InterpBench's RQ4 table (two-sided
Wilcoxon-Mann-Whitney p and Vargha-Delaney A12 of edge AUROC for every pair of methods), as JSON,
CSV and a terminal table. Plots are eval.leaderboard.plots.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from eval.leaderboard.cells import BenchRun, Cell
from eval.scoring.stats import MIN_ENTRIES, PairTest, a12_matrix, pairwise_tests

SCHEMA = "zoo-leaderboard/1"
TESTED_METRIC = "edge_auroc"
"""What the RQ4 table compares across entries (InterpBench §5 RQ4: edge-level AUROC)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spread:
    """Mean and sample standard deviation of one metric over the entries a method has it for."""

    mean: float | None
    """Mean (None: no entry has the metric)."""
    sd: float | None
    """Sample standard deviation, ddof 1 (None with fewer than two values)."""
    n: int
    """Entries that contributed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One method's line of the leaderboard."""

    method: str
    """BenchMethod.key."""
    entries: int
    """Entries scored (status ok)."""
    missing: int
    """Entries without a score file (score folders only)."""
    errors: int
    """Entries on which the method failed."""
    node_auroc: Spread
    """Node AUROC over entries."""
    edge_auroc: Spread
    """Edge AUROC over entries (the RQ4 table compares these)."""
    node_chance: Spread
    """The node chance line over the same entries."""
    edge_chance: Spread
    """The edge chance line over the same entries."""
    qkv_edge_auroc: Spread
    """q/k/v-level edge AUROC over entries (scorers only)."""
    qkv_edge_chance: Spread
    """Its chance line over the same entries."""
    node_f1: Spread
    """F1 of the identified node set."""
    edge_f1: Spread
    """F1 of the identified edges."""
    cpr: Spread
    """MIB CPR (scorers only)."""
    cmd: Spread
    """MIB CMD (scorers only)."""
    seconds: Spread
    """The method's wall time per entry."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Leaderboard:
    """Everything `zoo bench` writes."""

    rows: tuple[Row, ...]
    """One per method, in the order they were given."""
    pairs: tuple[PairTest, ...]
    """RQ4: every pair of methods with at least one edge AUROC."""
    entries: tuple[str, ...]
    """Entries of the run (name/model)."""
    cells: tuple[Cell, ...]
    """Every (method, entry) result the rows summarise."""
    families: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Family -> {"entries": [...], "rows": [Row, ...] over that family's entries only, "spread": best minus
    worst mean edge AUROC of the methods but `random`} (BenchEntry.family; empty when no entry has one)."""
    settings: dict[str, Any]
    """BenchSettings of the run."""
    computed: int
    """Cells computed in this run."""
    reused: int
    """Cells read back from the cache."""
    corruptions: dict[str, str] = dataclasses.field(default_factory=dict)
    """Entry -> the counterfactuals its cells used, where they are not resampled (eval.core.corruption)."""
    edge_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    """Entry -> whether patching confirms its edge labels (eval.leaderboard.cells.EdgeLabels)."""
    edge_exact: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Where some entries' edge labels are exact and others' not: the rows over the exact ones only
    (as a family's: entries, rows, spread); empty otherwise."""

    def to_json(self) -> dict[str, Any]:
        keys = [r.method for r in self.rows]
        pairs = [{**dataclasses.asdict(t), "significant": t.significant} for t in self.pairs]
        return _clean({"schema": SCHEMA, "tested_metric": TESTED_METRIC, **dataclasses.asdict(self), "pairs": pairs,
                       "a12_matrix": {"methods": keys, "a12": a12_matrix(keys, self.pairs)},
                       "notes": NOTES})


NOTES = {
    "auroc": "node and head-level edge AUROC against the entry's ground truth (circuit methods: pessimistic)",
    "chance": "expected AUROC of random scores of the method's kind under the report's rules (eval.scoring.chance); "
              "not 0.5 at edge level",
    "pairs": "two-sided Wilcoxon-Mann-Whitney U test of edge AUROC across entries (exact without ties, else the "
             "normal approximation with tie correction) and Vargha-Delaney A12 = P(X > Y) + P(X = Y)/2 of the "
             "first method against the second; 0.56/0.64/0.71 small/medium/large (InterpBench Tables 8-9); "
             "p_holm: Holm's step-down correction over every pair of the table; a pair is marked different only "
             "where p_holm < 0.05 and each method has at least 5 entries (eval.scoring.stats.MIN_ENTRIES)",
    "cells": "one row per method and entry: every per-entry AUROC (also in cells.csv)",
    "inert": "ground-truth edges no counterfactual of the task moves are left out of edge AUROC (cells' inert_edges)",
}


def spread(values: Sequence[float | None]) -> Spread:
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    return Spread(mean=float(np.mean(xs)) if xs else None, sd=float(np.std(xs, ddof=1)) if len(xs) > 1 else None,
                  n=len(xs))


def _rows(cells: Sequence[Cell]) -> tuple[Row, ...]:
    """One Row per method of `cells`, in their order."""
    rows = []
    for key in dict.fromkeys(c.method for c in cells):
        mine = [c for c in cells if c.method == key]
        ok = [c for c in mine if c.status == "ok"]
        rows.append(Row(method=key, entries=len(ok), missing=sum(c.status == "missing" for c in mine),
                        errors=sum(c.status == "error" for c in mine),
                        **{f: spread([getattr(c, f) for c in ok]) for f in (
                            "node_auroc", "edge_auroc", "node_chance", "edge_chance", "qkv_edge_auroc",
                            "qkv_edge_chance", "node_f1", "edge_f1", "cpr", "cmd", "seconds")}))
    return tuple(rows)


def family_rows(cells: Sequence[Cell], families: Mapping[str, str]) -> dict[str, Any]:
    """Per family (entry name -> family): its entries, its rows, and the spread of mean edge AUROC
    between the best and the worst method other than `random` (issue 36: a benchmark that tells methods
    apart spreads them)."""
    out: dict[str, Any] = {}
    for family in dict.fromkeys(f for f in families.values() if f):
        names = {e for e, f in families.items() if f == family}
        rows = _rows([c for c in cells if c.entry in names])
        means = [r.edge_auroc.mean for r in rows if r.method != "random" and r.edge_auroc.mean is not None]
        out[family] = {"entries": sorted(names), "rows": rows,
                       "spread": max(means) - min(means) if len(means) >= 2 else None}
    return out


def leaderboard(run: BenchRun, families: Mapping[str, str] | None = None,
                corruptions: Mapping[str, str] | None = None, edge_labels: Mapping[str, str] | None = None) -> Leaderboard:
    """Summarise a bench run per method (and per family of entries: entry name -> family) and test every
    pair of methods; `corruptions`: entry -> its cells' counterfactuals, recorded where not `resample`;
    `edge_labels`: entry -> whether patching confirms its edge labels (the rows over the exact ones
    are reported apart where the others are not)."""
    rows = _rows(run.cells)
    samples = {r.method: [c.edge_auroc for c in run.cells if c.method == r.method and c.status == "ok"]
               for r in rows}
    entries = tuple(dict.fromkeys(f"{c.entry}/{c.model}" for c in run.cells))
    return Leaderboard(rows=rows, pairs=pairwise_tests(samples), entries=entries, cells=run.cells,
                       settings=dataclasses.asdict(run.settings), computed=run.computed, reused=run.reused,
                       families=family_rows(run.cells, families or {}),
                       corruptions={e: c for e, c in (corruptions or {}).items() if c != "resample"},
                       edge_labels=dict(edge_labels or {}), edge_exact=_edge_exact(run.cells, edge_labels or {}))


def _edge_exact(cells: Sequence[Cell], labels: Mapping[str, str]) -> dict[str, Any]:
    """The rows over the entries whose edge labels patching confirms, where some others' it does not."""
    entries = {c.entry for c in cells}
    exact = {e for e in entries if labels.get(e) == "exact"}
    if not exact or not any(labels.get(e) == "not exact" for e in entries):
        return {}
    return family_rows(cells, {e: "edge-exact" for e in exact})["edge-exact"]


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


CSV_FIELDS = ("node_auroc", "edge_auroc", "node_chance", "edge_chance", "qkv_edge_auroc", "qkv_edge_chance", "node_f1",
              "edge_f1", "cpr", "cmd", "seconds")


def to_csv(board: Leaderboard) -> str:
    """One row per method: counts, then mean and sd of every metric."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["method", "entries", "missing", "errors", *(f"{f}_{s}" for f in CSV_FIELDS for s in ("mean", "sd"))])
    for r in board.rows:
        w.writerow([r.method, r.entries, r.missing, r.errors,
                    *(_num(v) for f in CSV_FIELDS for v in (getattr(r, f).mean, getattr(r, f).sd))])
    return out.getvalue()


def pairs_to_csv(board: Leaderboard) -> str:
    """The RQ4 table, one row per pair."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["a", "b", "n_a", "n_b", "u", "p", "p_holm", "significant", "test", "a12", "magnitude"])
    for t in board.pairs:
        c = t.comparison
        w.writerow([t.a, t.b, c.n_a, c.n_b, _num(c.u), _num(c.p), _num(t.p_holm), int(t.significant), c.test,
                    _num(c.a12), t.magnitude])
    return out.getvalue()


CELL_FIELDS = ("method", "entry", "model", "seed", "status", "kind", *CSV_FIELDS)


def cells_to_csv(board: Leaderboard) -> str:
    """One row per method and entry: every per-entry number behind the means of `to_csv`."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CELL_FIELDS)
    for c in board.cells:
        w.writerow([_num(v) if isinstance(v, float) else ("" if v is None else v)
                    for v in (getattr(c, f) for f in CELL_FIELDS)])
    return out.getvalue()


def _num(v: float | None) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v:.6g}"


def _ms(s: Spread) -> str:
    if s.mean is None:
        return "-"
    return f"{s.mean:.3f}" + (f"±{s.sd:.3f}" if s.sd is not None else "")


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _grid(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _group_grid(rows: Sequence[Row]) -> list[str]:
    """The short table of a group of entries (a family, the edge-exact entries)."""
    return _grid([("method", "n", "AUROC-n", "AUROC-e", "chance-e", "AUROC-qkv", "chance-qkv")] + [
        (r.method, str(r.entries), _ms(r.node_auroc), _ms(r.edge_auroc), _f(r.edge_chance.mean),
         _ms(r.qkv_edge_auroc), _f(r.qkv_edge_chance.mean)) for r in rows])


def table(board: Leaderboard) -> str:
    """The terminal leaderboard: the per-method table, then RQ4's p and A12 matrices."""
    header = ("method", "n", "AUROC-n", "chance-n", "AUROC-e", "chance-e", "AUROC-qkv", "chance-qkv", "F1-n", "F1-e",
              "CPR", "CMD", "sec/entry")
    rows = [header]
    for r in board.rows:
        n = (f"{r.entries}" + (f" ({r.missing} missing)" if r.missing else "")
             + (f" ({r.errors} failed)" if r.errors else ""))
        rows.append((r.method, n, _ms(r.node_auroc), _f(r.node_chance.mean), _ms(r.edge_auroc), _f(r.edge_chance.mean),
                     _ms(r.qkv_edge_auroc), _f(r.qkv_edge_chance.mean), _f(r.node_f1.mean), _f(r.edge_f1.mean), _f(r.cpr.mean), _f(r.cmd.mean),
                     _f(r.seconds.mean, ".2f")))
    s = board.settings
    out = [f"leaderboard over {len(board.entries)} entries ({', '.join(board.entries)}); n={s['n']}, "
           f"seed {s['seed']}, ablation {s['ablation']}; {board.computed} computed, {board.reused} from the cache",
           *_grid(rows),
           "AUROC-n/e/qkv: node/head-edge/q-k-v-edge AUROC (q/k/v: scorers only; a head edge of the ground truth "
           "stands for its q, k, v parts, inert parts left out), mean±sd over entries; chance-n/e/qkv: the chance line "
           "(expected AUROC of random "
           "scores of the method's kind, not 0.5), mean over the same entries; F1 at the identified set; CPR/CMD: "
           "MIB on the q/k/v graph (scorers only)"]
    keys = [r.method for r in board.rows if r.edge_auroc.n]
    if len(keys) >= 2:
        p = {(t.a, t.b): t.comparison.p for t in board.pairs}
        sig = {(t.a, t.b) for t in board.pairs if t.significant}
        a12 = a12_matrix(keys, board.pairs)
        out.append("RQ4 (InterpBench Tables 8-9) on edge AUROC across entries: Wilcoxon-Mann-Whitney p (upper, "
                   "uncorrected) and Vargha-Delaney A12 of row vs column (lower; * Holm-adjusted p < 0.05 over the "
                   f"{len(board.pairs)} pairs, each method on at least {MIN_ENTRIES} entries)")
        grid = [("", *keys)]
        for i, a in enumerate(keys):
            cells = []
            for j, b in enumerate(keys):
                if i < j:
                    cells.append(_f(p.get((a, b))))
                elif i > j:
                    v = a12[i][j]
                    star = "*" if (b, a) in sig else ""
                    cells.append(_f(v) + star)
                else:
                    cells.append("-")
            grid.append((a, *cells))
        out += _grid(grid)
    out += _group_lines(board)
    return "\n".join(out)


def _group_lines(board: Leaderboard) -> list[str]:
    """What `table` prints after the RQ4 matrices: each family apart, the entries whose edge labels
    patching contradicts and the rows over the others, failed cells, inert ground-truth edges."""
    out: list[str] = []
    for family, f in board.families.items():
        shifted = sorted({board.corruptions[e] for e in f["entries"] if e in board.corruptions})
        note = f"; counterfactuals {', '.join(shifted)}, not the resampling SIIT trained with" if shifted else ""
        out.append(f"family {family} ({', '.join(f['entries'])}): edge AUROC per method (mean over its entries); "
                   f"best minus worst but random: {_f(f['spread'])}{note}")
        out += _group_grid(f["rows"])
    contradicted = sorted(e for e, v in board.edge_labels.items() if v == "not exact")
    if contradicted:
        out.append(f"edge labels that patching contradicts (validation.json: a non-circuit edge above "
                   f"the bound): {', '.join(contradicted)}; their edge AUROCs score methods partly against labels "
                   "that are not ground truth at edge level")
    if f := board.edge_exact:
        out.append(f"entries whose edge labels patching confirms ({', '.join(f['entries'])}): edge AUROC per method; "
                   f"best minus worst but random: {_f(f['spread'])}")
        out += _group_grid(f["rows"])
    failed = [c for c in board.cells if c.status == "error"]
    for c in failed:
        out.append(f"failed: {c.method} on {c.entry}: {c.message}")
    inert = {c.entry: c.inert_edges for c in board.cells if c.inert_edges}
    for entry, edges in inert.items():
        out.append(f"inert ground-truth edges of {entry} (no counterfactual moves them: listed, never a miss or "
                   f"a hit): {', '.join(edges)}")
    return out
