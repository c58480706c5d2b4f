"""A method's output -> MIB files on disk (`zoo eval --save-scores DIR`), readable by MIB's tools
and by `zoo eval --scores` alike.

A scoring method gives one MIB score file `<DIR>/<key>.json` (eval.methods.interface.to_score_file); a
circuit method (acdc, node_sp, edge_sp) one folder `<DIR>/<key>/` of circuit files, one per
hyperparameter value, as MIB submits circuits of several sizes (eval.methods.interface.to_circuit_files).
Each is written complete under a temporary name and then renamed into place, so a crash never
leaves a half-written file that reads as a smaller circuit.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.core.directory_swap import fsync_tree, replace_directory, sibling_tmp
from eval.core.graph import ComputationGraph
from eval.methods.interface import MethodOutput, to_circuit_files, to_score_file


def file_stem(key: str) -> str:
    """A file name for a method key: `pkg.mod:fn` -> `pkg.mod_fn` (no separators, no leading dot)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", key).lstrip(".")
    return stem or "method"


def save_output(output: MethodOutput, graph: ComputationGraph, directory: Path, key: str,
                cfg: Mapping[str, Any] | None = None) -> Path:
    """Write `output` under `directory` and return the file (scores) or folder (circuits) written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {**dict(cfg or {}), "method": key, "n_layers": graph.n_layers, "n_heads": graph.n_heads}
    if output.circuits is not None:
        dest = directory / file_stem(key)
        tmp = sibling_tmp(dest, "write")
        for name, data in to_circuit_files(output, graph, cfg).items():
            (tmp / name).write_text(json.dumps(data, indent=1))
        fsync_tree(tmp)
        replace_directory(tmp, dest)
        return dest
    dest = directory / f"{file_stem(key)}.json"
    tmp = dest.with_name(f".{dest.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(to_score_file(output, cfg), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    return dest
