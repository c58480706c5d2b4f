"""The whole built-in catalogue (InterpBench Tables 10 and 11): for every case, does it compile,
does the compiled model equal `rasp.evaluate`, and how big is it. Prints JSON.

Verification here draws 200 uniform inputs plus 200 from the case's own sampler (the tests use
hypothesis; this is the same check, cheaper to run over all cases in one process).

Usage: python tests/benchmarks/bench_catalogue.py [--cases 2 7] [--n 200] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import traceback
from pathlib import Path


def verify(compiled, n: int, seed: int = 0) -> tuple[bool, str]:
    """True if the compiled model's outputs equal RASP's on n uniform + n sampler inputs."""
    import numpy as np
    from tracr.rasp import rasp

    from rasp_programs.case import uniform_sampler

    case = compiled.case
    program = case.program
    rng = np.random.default_rng(seed)
    seqs = uniform_sampler(case.vocab, case.min_seq_len, case.max_seq_len)(rng, n)
    seqs = [tuple(s) for s in seqs] + case.sample(n, seed)
    got = compiled.run(seqs)
    for seq, out in zip(seqs, got):
        expected = rasp.evaluate(program, list(seq))
        if case.task_kind == "regression":
            same = len(out) == len(expected) and all(
                math.isclose(g, e, abs_tol=1e-4) for g, e in zip(out, expected))
        else:
            same = list(out) == list(expected)
        if not same:
            return False, f"on {list(seq)}: model {out} != RASP {expected}"
    return True, ""


def row(case_id: str, cache: Path, n: int) -> dict:
    from rasp_programs.lookup import get_case
    from rasp_programs.compile import compile_case

    out: dict = {"id": case_id, "compiled": False, "verified": False}
    try:
        case = get_case(case_id)
        out["name"] = case.name
        start = time.perf_counter()
        compiled = compile_case(case, cache)
        out["compile_seconds"] = round(time.perf_counter() - start, 2)
        out["compiled"] = True
        cfg = compiled.config
        out.update(n_layers=cfg["n_layers"], n_heads=cfg["n_heads"], d_model=cfg["d_model"],
                   nodes=len(compiled.graph.nodes), edges=len(compiled.graph.edges))
        out["verified"], why = verify(compiled, n)
        if why:
            out["error"] = why
    except Exception as exc:  # a case that fails is reported, the others still run
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        out["traceback"] = traceback.format_exc(limit=3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", help="case ids (default: every built-in case)")
    parser.add_argument("--n", type=int, default=200, help="inputs per check (x2: uniform + sampler)")
    parser.add_argument("--cache", type=Path, help="compile cache dir (default: a fresh temp dir)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from rasp_programs.lookup import builtin_case_ids
    from rasp_programs.catalogue import APPENDIX_H_IDS, NOT_BUILT

    ids = args.cases or builtin_case_ids()
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or Path(tmp)
        rows = [row(cid, cache, args.n) for cid in ids]
    done = {r["id"] for r in rows if r["compiled"] and r["verified"]}
    print(json.dumps({
        "cases": rows,
        "appendix_h_described": len(APPENDIX_H_IDS),
        "appendix_h_compiled_and_verified": sum(cid in done for cid in APPENDIX_H_IDS),
        "compiled": sum(r["compiled"] for r in rows),
        "verified": sum(r["verified"] for r in rows),
        "total": len(rows),
        "not_built": NOT_BUILT,
        "compile_seconds_total": round(sum(r.get("compile_seconds", 0) for r in rows), 1),
    }, indent=1))


if __name__ == "__main__":
    main()
