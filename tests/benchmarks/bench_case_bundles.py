"""Case bundles (planted.case_bundles, issue 32 item 1): each main case trained as the main task of a
multi-task model beside the same case trained alone. Per case: the bundle's training (met, steps, time,
every view met), its ground truth (node bound, edge labels) and the battery of no-intervention looks on
the case's view (its own inputs, and every task's inputs), beside the single-task entry's battery on the
case's inputs; then per look the median separation and the entries over 0.75 on each side.

    python tests/benchmarks/bench_case_bundles.py --root ROOT --alone ROOT2 [--cases 8,19,...] [--n 2000]

ROOT holds `planted-mt-case-<id>.case-<id>` (`zoo train planted mt-case-<id>.case-<id> --all-views`),
ROOT2 `case-<id>` (`zoo train --cases ...`). Reads entries only; prints JSON; not part of CI. The numbers
go into issue 32's note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_multi_task import _battery, _entry  # noqa: E402

BOUND = 0.75


def _ground_truth(validation: dict, training: dict) -> dict:
    edges, bounds = validation.get("edge_effects") or {}, validation.get("effect_bounds") or {}
    views = ((validation.get("tasks") or {}).get("views") or {}).values()
    return {"met": training.get("met_criterion"), "steps": training.get("steps"),
            "training_s": round(training.get("wall_time_s") or 0.0, 1),
            "views_met": f"{sum(bool(v['met_criterion']) for v in views)} of {len(views)}",
            "node_bound_exact": bounds.get("exact"), "max_node_effect": bounds.get("max_effect"),
            "edges_exact": edges.get("exact"), "max_edge_effect": edges.get("max_out_of_circuit_edge_effect")}


def run(root: Path, alone: Path | None, cases: list[str], n: int, seed: int) -> dict:
    import torch

    from planted.case_bundles import PREFIX, case_bundle

    torch.set_num_threads(1)
    rows = []
    for cid in cases:
        view = f"{PREFIX}{cid}.case-{cid}"
        if not (root / "entries" / f"planted-{view}").is_dir():
            continue
        bundle = case_bundle(cid)
        case, entry, model = _entry(root, view)
        every = bundle.task()
        row = {"case": cid, "circuit": list(entry.circuit.nodes),
               **_ground_truth(entry.validation or {}, entry.training or {}),
               "own_inputs": _battery(model, *entry.encoding.encode(case.sample(n, seed)), entry.circuit.nodes),
               "every_tasks_inputs": _battery(model, *every.encoding.encode(every.case.sample(n, seed)),
                                              entry.circuit.nodes)}
        if alone is not None and (alone / "entries" / f"case-{cid}").is_dir():
            single_case, single_entry, single = _entry(alone, cid, "case")
            row["alone"] = _battery(single, *single_entry.encoding.encode(single_case.sample(n, seed)),
                                    single_entry.circuit.nodes)
        rows.append(row)
    sides = [s for s in ("own_inputs", "every_tasks_inputs", "alone") if any(s in r for r in rows)]
    looks = sorted({k for r in rows for s in sides if s in r for k in r[s]["looks"]})
    per_look = {}
    for look in looks:
        per_look[look] = {}
        for side in sides:
            values = [r[side]["looks"][look] for r in rows if side in r and r[side]["looks"].get(look) is not None]
            if values:
                per_look[look][side] = {"median": round(statistics.median(values), 3),
                                        "over_bound": sum(v > BOUND for v in values), "entries": len(values)}
    return {"n": n, "seed": seed, "cases": rows, "per_look": per_look,
            "median_over_cases": {s: {"max": statistics.median(r[s]["max"] for r in rows if s in r),
                                      "median": statistics.median(r[s]["median"] for r in rows if s in r)}
                                  for s in sides}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="a zoo root with the case bundles' entries")
    parser.add_argument("--alone", type=Path, default=None, help="a zoo root with the single cases' entries")
    parser.add_argument("--cases", default=None, help="case ids (default: every case with a bundle)")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from planted.case_bundles import MAIN_CASES

    cases = args.cases.split(",") if args.cases else list(MAIN_CASES)
    print(json.dumps(run(args.root, args.alone, cases, args.n, args.seed), indent=1))


if __name__ == "__main__":
    main()
