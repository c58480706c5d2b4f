"""Build `catalogue.json`: the compiled size of every built-in case, shipped so that `zoo list`
needs neither jax nor torch. `tests/test_rasp_programs/test_catalogue.py` checks the shipped file against a fresh
compile; regenerate with `python -m rasp_programs.summary [CACHE_DIR]`."""

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
    }


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
