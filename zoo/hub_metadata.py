"""Zoo entries -> the benchmark metadata table at the root of the Hub repository.

One row per entry (task, vocabulary, lengths, architecture, training settings, validation figures,
file names with sha256 sums and sizes). Written as `benchmark_metadata.json` (the source of truth,
merged on every push so entries pushed one at a time build the full table), the same table as CSV,
and as Parquet when pyarrow happens to be installed (it is not a dependency of zoo).

validation.json and training.json come from the training code; only their scalar fields are
tabulated: top-level numbers (e.g. accuracy, iia, siia) and scalars one dict level down
(e.g. hyperparameters.lr), skipping metric histories.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zoo.artifact import MANIFEST, read_json, verify_entry

TABLE_FORMAT = "zoo-benchmark/1"
METADATA_JSON = "benchmark_metadata.json"
METADATA_CSV = "benchmark_metadata.csv"
METADATA_PARQUET = "benchmark_metadata.parquet"
ARCHITECTURE_KEYS = ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "d_vocab", "d_vocab_out",
                     "n_ctx", "act_fn", "attention_dir")
HEADLINE_FIGURES = ("accuracy", "iia", "siia")

Scalar = str | int | float | bool | None


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def scalar_fields(data: Mapping[str, Any] | None, *, skip: Iterable[str] = ("history",)) -> dict[str, Scalar]:
    """Top-level scalars and scalars one dict level down (dotted keys); lists and deeper data dropped."""
    out: dict[str, Scalar] = {}
    skip = tuple(skip)
    for key, value in (data or {}).items():
        if any(s in key for s in skip):
            continue
        if _is_scalar(value):
            out[key] = value
        elif isinstance(value, Mapping):
            for sub, inner in value.items():
                if _is_scalar(inner) and not any(s in sub for s in skip):
                    out[f"{key}.{sub}"] = inner
    return out


def validation_figures(validation: Mapping[str, Any] | None) -> dict[str, float]:
    """Numeric validation figures, accuracy / IIA / SIIA first, e.g. {"accuracy": 1.0, "iia": 0.99}.

    siit.validation nests them under "metrics"; those are lifted to the top (a top-level figure of
    the same name wins), other one-level-down figures keep a dotted name.
    """
    numbers: dict[str, float] = {}
    for key, value in scalar_fields(validation).items():
        if key.endswith("schema_version"):  # a format number, not a figure
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            name = key.removeprefix("metrics.")
            if name == key or name not in numbers:
                numbers[name] = value
    ordered = {k: numbers.pop(k) for k in HEADLINE_FIGURES if k in numbers}
    return {**ordered, **numbers}


def entry_row(entry_dir: Path) -> dict[str, Any]:
    """The table row of one verified entry directory."""
    files = verify_entry(entry_dir)
    config = read_json(entry_dir, "config.json")
    case = read_json(entry_dir, "case.json")
    circuit = read_json(entry_dir, "circuit.json")
    optional = lambda name: read_json(entry_dir, name) if name in files else None  # noqa: E731
    kind, _, ident = entry_dir.name.partition("-")
    listed = {**files, MANIFEST: None}
    return {
        "entry": entry_dir.name,
        "kind": kind,
        "id": str(case.get("id", ident)),
        "name": case.get("name"),
        "description": case.get("description"),
        "task_kind": case.get("task_kind"),
        "vocab": case.get("vocab"),
        "min_seq_len": case.get("min_seq_len"),
        "max_seq_len": case.get("max_seq_len"),
        "causal": case.get("causal"),
        "architecture": {k: config.get(k) for k in ARCHITECTURE_KEYS},
        "circuit": {"granularity": circuit.get("granularity", "head"),
                    "n_nodes": len(circuit.get("nodes", [])), "n_edges": len(circuit.get("edges", []))},
        "training": scalar_fields(optional("training.json")),
        "validation": validation_figures(optional("validation.json")),
        "files": {name: {"sha256": digest if digest is not None else _sha(entry_dir / name),
                         "size": (entry_dir / name).stat().st_size}
                  for name, digest in sorted(listed.items())},
    }


def _sha(path: Path) -> str:
    from zoo.artifact import sha256_file

    return sha256_file(path)


def entry_sort_key(name: str) -> tuple[str, int, str]:
    """case-3 before case-33; numbers compare as numbers."""
    kind, _, ident = name.partition("-")
    return (kind, int(ident), "") if ident.isdigit() else (kind, 1 << 62, ident)


def merge_rows(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows of `old` updated by `new` (matched by entry name), sorted by entry."""
    rows = {row["entry"]: dict(row) for row in old}
    rows.update({row["entry"]: dict(row) for row in new})
    return [rows[name] for name in sorted(rows, key=entry_sort_key)]


def table_json(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": TABLE_FORMAT, "entries": rows}


def rows_from_json(data: Any) -> list[dict[str, Any]]:
    """Rows of a benchmark_metadata.json document; a ValueError if it is not one."""
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT or not isinstance(data.get("entries"), list):
        raise ValueError(f"not a {TABLE_FORMAT} table")
    rows = data["entries"]
    if not all(isinstance(r, dict) and isinstance(r.get("entry"), str) for r in rows):
        raise ValueError("a row without an entry name")
    return rows


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """Nested dicts become dotted columns; lists become JSON text (CSV and Parquet are flat)."""
    out: dict[str, Scalar] = {}
    for key, value in row.items():
        column = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, column + "."))
        elif isinstance(value, (list, tuple)):
            out[column] = json.dumps(value, ensure_ascii=False)
        else:
            out[column] = value
    return out


def _columns(flat_rows: list[dict[str, Scalar]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in flat_rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


def table_csv(rows: list[dict[str, Any]]) -> str:
    flat = [flatten(r) for r in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=_columns(flat), lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    return buf.getvalue()


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def table_parquet(rows: list[dict[str, Any]]) -> bytes:
    """The flat table as Parquet bytes (needs pyarrow; columns of mixed types become text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = [flatten(r) for r in rows]
    columns = {}
    for name in _columns(flat):
        values = [r.get(name) for r in flat]
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:
            values = [None if v is None else float(v) for v in values]
        elif len(kinds) > 1:
            values = [None if v is None else str(v) for v in values]
        columns[name] = values
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def table_files(rows: list[dict[str, Any]], *, parquet: bool | None = None) -> dict[str, bytes]:
    """{file name: content} of the benchmark table at the repository root."""
    files = {
        METADATA_JSON: (json.dumps(table_json(rows), indent=1, ensure_ascii=False) + "\n").encode(),
        METADATA_CSV: table_csv(rows).encode(),
    }
    if parquet_available() if parquet is None else parquet:
        files[METADATA_PARQUET] = table_parquet(rows)
    return files


_SAFE_TEXT = re.compile(r"[|\n\r]")


def cell(value: Any) -> str:
    """A Markdown table cell (pipes and newlines would break the table)."""
    if isinstance(value, float):
        return f"{value:.3f}"
    return _SAFE_TEXT.sub(" ", "-" if value is None else str(value))
