"""How many verified, trained entries the zoo holds: every entry under the given roots, counted once
per case (met if any root's entry met its criterion: accuracy, every IIA and SIIA at 1.0 and every
distractor's R² at its target on held-out data, as training.json records), and generated cases
counted once per distinct program. Prints JSON.

Generated names from different settings can name the same draw (`gen-0-1.L2-3` is `gen-0-1`:
settings steer one stream of draws), so generated cases are grouped by what they compute: the
program's outputs (rasp.evaluate) on every valid input, or on a fixed sample where there are too
many (rasp_programs.generate_check.verification_inputs). Two programs that compute the same
function count once, whatever their names.

With --exact, a met entry counts only if it is also exact on unpadded inputs of every length
(bench_unpadded_lengths.exactness: accuracy 1.0 at each length, no out-of-circuit node changing
more than 1% of the positions when resampled or mean-ablated at one length): the criterion is
judged on 512 validation inputs, and a model can meet it and still be wrong on a rare input
(gen-2-6.L2-3: accuracy .9993 at one length). Compiled cases only (planted entries are reported as
unchecked); about 5 s an entry.

The targets (issue 12): more than InterpBench's 86 trained models and TracrBench's 121 compiled,
untrained programs.

    python tests/benchmarks/bench_zoo_count.py [--exact] ROOT [ROOT ...]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

INTERPBENCH_TRAINED = 86
TRACRBENCH_COMPILED = 121
LEAK = 0.01
"""Largest share of positions one out-of-circuit node may change at one length (--exact)."""


def entries(roots: list[Path]) -> dict[str, list[dict]]:
    """case id -> the training.json summaries of its entries across the roots."""
    found: dict[str, list[dict]] = {}
    for root in roots:
        for folder in sorted((root / "entries").glob("*")):
            if not (folder / "training.json").is_file() or not (folder / "case.json").is_file():
                continue
            case = json.loads((folder / "case.json").read_text())
            training = json.loads((folder / "training.json").read_text())
            family = case.get("family", "case")
            key = f"{family}:{case['id']}"
            found.setdefault(key, []).append({
                "path": str(folder), "root": root, "family": family, "id": case["id"],
                "met": bool(training["met_criterion"]), "steps": training["steps"],
                "n_train": training["config"].get("n_train"), "epochs": training["config"].get("epochs")})
    return found


def kind(row: dict) -> str:
    """builtin, generated, outside (package.module:function) or planted."""
    if row["family"] == "planted":
        return "planted"
    return "generated" if row["id"].startswith("gen-") else "outside" if ":" in row["id"] else "builtin"


def behaviour(case_id: str) -> str:
    """A fingerprint of what a generated case computes: its outputs on every valid input."""
    from tracr.rasp import rasp

    from rasp_programs.lookup import get_case
    from rasp_programs.generate_check import verification_inputs

    case = get_case(case_id)
    program = case.program
    seqs = verification_inputs(case)
    outputs = [[round(v, 6) if isinstance(v, float) else v for v in rasp.evaluate(program, list(s))] for s in seqs]
    text = json.dumps([list(case.vocab), case.min_seq_len, case.max_seq_len, outputs], default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def exact(row: dict) -> dict | None:
    """The unpadded-length check of one entry; None for a planted entry (not checked)."""
    if row["family"] != "case":
        return None
    here = str(Path(__file__).parent)
    if here not in sys.path:  # the benchmarks are scripts, not a package
        sys.path.insert(0, here)
    from bench_unpadded_lengths import exactness

    w = exactness(row["root"], row["id"])
    return {"acc_min": round(w["acc_min"], 6), "resample": round(w["resample"], 6), "mean": round(w["mean"], 6),
            "exact": w["acc_min"] == 1.0 and max(w["resample"], w["mean"]) <= LEAK}


def main(argv: list[str]) -> int:
    check = "--exact" in argv
    argv = [a for a in argv if a != "--exact"]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    bad = [a for a in argv if a.startswith("-") or not (Path(a) / "entries").is_dir()]
    if bad:
        print(f"bench_zoo_count: not a zoo root (no entries/ folder) or unknown option: {bad[0]}", file=sys.stderr)
        return 2
    roots = [Path(a) for a in argv]
    found = entries(roots)
    met = {key: any(e["met"] for e in rows) for key, rows in found.items()}
    inexact: dict[str, list[dict]] = {}
    if check:
        import torch

        torch.set_num_threads(1)
        for key in [k for k, ok in met.items() if ok]:
            results = []
            for row in (e for e in found[key] if e["met"]):
                result = exact(row)
                if result is None or result["exact"]:
                    break  # a planted entry is unchecked; a case counts once one met entry is exact
                results.append({"path": row["path"], **result})
            else:
                inexact[key] = results
                met[key] = False
    kinds = {key: kind(rows[0]) for key, rows in found.items()}
    families: dict[str, dict[str, int]] = {}
    for key, ok in met.items():
        fam = families.setdefault(kinds[key], {"entries": 0, "met": 0})
        fam["entries"] += 1
        fam["met"] += ok
    groups: dict[str, list[str]] = {}
    for key, ok in met.items():
        if ok and kinds[key] == "generated":
            case_id = found[key][0]["id"]
            groups.setdefault(behaviour(case_id), []).append(case_id)
    duplicates = sorted(sorted(names) for names in groups.values() if len(names) > 1)
    distinct_generated = len(groups)
    verified = sum(ok for key, ok in met.items() if kinds[key] != "generated") + distinct_generated
    report = {
        "roots": [str(r) for r in roots],
        "families": families,
        "generated_distinct_programs_met": distinct_generated,
        "generated_duplicates": duplicates,
        "verified_trained_entries": verified,
        "targets": {"interpbench_trained": INTERPBENCH_TRAINED, "tracrbench_compiled": TRACRBENCH_COMPILED,
                    "above_both": verified > max(INTERPBENCH_TRAINED, TRACRBENCH_COMPILED)},
        "exactness_checked": check,
        "met_but_inexact": inexact,
        "not_met": sorted(key for key, ok in met.items() if not ok and key not in inexact),
        "met_only_with": {key: sorted({f"n_train {e['n_train']}, epochs {e['epochs']}" for e in rows if e["met"]})
                          for key, rows in found.items() if met[key] and not all(e["met"] for e in rows)},
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
