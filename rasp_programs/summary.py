"""Build `catalogue.json`: the compiled size and ground-truth graph of every built-in case, shipped so
that `zoo list` needs neither jax nor torch, and a multi-task bundle built around a case
(planted.case_bundles) places its circuit without compiling. `tests/test_rasp_programs/test_catalogue.py`
checks the shipped file against a fresh compile; regenerate with `python -m rasp_programs.summary
[CACHE_DIR]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CATALOGUE_PATH = Path(__file__).with_name("catalogue.json")


def summary_row(compiled: Any) -> dict[str, Any]:
    case, cfg = compiled.case, compiled.config
    return {
        "id": case.id,
        "name": case.name,
        "task_kind": case.task_kind,
        "description": case.description,
        "n_layers": cfg["n_layers"],
        "n_heads": cfg["n_heads"],
        "d_model": cfg["d_model"],
        "nodes": len(compiled.graph.nodes),
        "edges": len(compiled.graph.edges),
        # the ground-truth graph itself, so that a multi-task bundle built around a case
        # (planted.case_bundles) knows its circuit without compiling
        "graph": {"nodes": list(compiled.graph.nodes), "edges": [list(e) for e in compiled.graph.edges],
                  "labels": dict(compiled.graph.labels)},
        "output_vocab": None if compiled.encoding.output_vocab is None else list(compiled.encoding.output_vocab),
    }


def shipped_row(case_id: str) -> dict[str, Any] | None:
    """The shipped summary row of a built-in case (with its `graph`), or None."""
    rows = json.loads(CATALOGUE_PATH.read_text())["cases"]
    return next((row for row in rows if row["id"] == str(case_id)), None)


def build_catalogue(cache_dir: Path | None = None) -> dict[str, Any]:
    from rasp_programs.lookup import builtin_case_ids, get_case
    from rasp_programs.compile import compile_case

    from rasp_programs.catalogue import NOT_BUILT

    rows = [summary_row(compile_case(get_case(cid), cache_dir)) for cid in builtin_case_ids()]
    # why: a described case that could not be built is listed with its reason, never dropped
    not_built = [{"id": cid, "reason": why} for cid, why in NOT_BUILT.items()]
    return {"schema_version": 1, "cases": rows, "not_built": not_built}


def main(argv: list[str] | None = None) -> None:
    """`python -m rasp_programs.summary [CACHE_DIR]`: CACHE_DIR is a compile cache to reuse."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    data = build_catalogue(Path(args[0]) if args else None)
    CATALOGUE_PATH.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {CATALOGUE_PATH} ({len(data['cases'])} cases)")


if __name__ == "__main__":
    main()
