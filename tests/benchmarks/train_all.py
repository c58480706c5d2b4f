"""Train every built-in case with the default configuration and print one JSON row per case:
steps, epochs, wall time, final accuracy / IIA / SIIA, largest out-of-circuit effect under
resample ablation. Cases that miss the criterion are reported with their numbers.
Usage: python tests/benchmarks/train_all.py [case ids...]"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


def main(ids: list[str]) -> None:
    import torch

    from rasp_programs.case import builtin_case_ids, get_case
    from rasp_programs.compile import compile_case
    from siit.config import TrainConfig
    from siit.trainer import train
    from siit.validation import validate_model

    torch.set_num_threads(1)
    cache = Path(tempfile.mkdtemp(prefix="zoo-train-all-"))
    rows = []
    for case_id in ids or builtin_case_ids():
        compiled = compile_case(get_case(case_id), cache)
        start = time.perf_counter()
        result = train(compiled, TrainConfig())
        validation = validate_model(result.model, result.evaluator)
        m = result.metrics
        rows.append({
            "case": case_id, "met_criterion": result.met_criterion, "steps": result.steps,
            "epochs": round(result.steps / result.config.steps_per_epoch, 2),
            "wall_s": round(time.perf_counter() - start, 2),
            "accuracy": round(m["accuracy"], 4), "iia_min": round(m["iia_min"], 4),
            "siia_min": round(m["siia_min"], 4), "siia_all": round(m["siia_all"], 4),
            "max_out_of_circuit_resample_effect": validation["max_out_of_circuit_effect"]["resample"],
            "min_in_circuit_resample_effect": validation["min_in_circuit_resample_effect"],
        })
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
