"""How well a planted entry's busy heads fit their distractors, and why not: per busy node its recorded
R² (training.json) and the R² of the best affine read of its target from the directions its output
varies along (is the information there?); for circuit and busy nodes, output variance, mean norm and
norm²/variance (the loudness the targets are matched to, siit.loudness), averaged over positions as
eval.core.node_heuristics does. Prints one JSON object.

    python tests/benchmarks/bench_distractor_fit.py --root ROOT [--planted large-circuit | --planted case:33]

Where the recorded R² falls short of the affine read, the node carries its target but not at the scale
and offset the loudness asks for (large-circuit's entry of the eighteenth session: recorded median 0.84,
affine 0.96; its circuit heads' norm²/variance 0.14 against 0.59 for its busy heads, which worked at
every position). Not part of CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path


def measure(root: Path, name: str) -> dict:
    import torch

    from siit.distractors import mean_norms, node_outputs, variances
    from zoo.entry import load_entry_dir
    from zoo.high_level_source import high_level_task, resolve_case
    from zoo.paths import compiled_dir, zoo_root
    from zoo.validate_entry import entry_setup

    torch.set_num_threads(1)
    kind, _, ident = name.rpartition(":")
    case = resolve_case(kind or "planted", ident)
    dest = root / "entries" / case.entry_name
    entry = load_entry_dir(dest)
    task = high_level_task(case, compiled_dir(zoo_root(str(root))))
    recorded = {x["node"]: x["r2"] for x in entry.training["realism"]["distractors"]}
    if kind != "case" and not any("at" in x for x in entry.training["realism"]["distractors"]):  # trained before DistractorPositions
        task = dataclasses.replace(task, distractor_positions="every")
    s, model = entry_setup(task, entry, dest)
    d = s.evaluator.data
    with torch.no_grad():
        acts = model(d.tokens, d.mask, return_acts=True, present=d.present)[1]
        busy = node_outputs(acts, s.targets.slots)  # [D, B, T, d_model]
        z = s.targets.standardised(d.tokens, d.mask)  # [D, B, T]
        affine = {}
        for i, dist in enumerate(s.targets.distractors):
            x, y = busy[i][d.label_mask].double(), z[i][d.label_mask].double()
            x = x - x.mean(0)
            _, sv, v = torch.linalg.svd(x, full_matrices=False)
            x = x @ v[sv > 1e-4 * sv[0]].T  # the directions it writes (float noise in the others would overfit)
            x1 = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
            res = y - x1 @ torch.linalg.lstsq(x1, y[:, None]).solution[:, 0]
            affine[dist.node] = 1.0 - float(res.pow(2).sum() / (y - y.mean()).pow(2).sum())
        w = d.label_mask.double()
        loud = {}
        for group, slots in (("circuit", s.circuit_slots), ("busy", s.targets.slots)):
            out = node_outputs(acts, slots).double()
            var, norm = variances(out, w), mean_norms(out, w)
            loud[group] = {"variance_median": round(float(var.median()), 4), "norm_median": round(float(norm.median()), 4),
                           "norm2_over_variance_median": round(float((norm**2 / var.clamp(min=1e-12)).median()), 3)}
    worst = sorted(recorded, key=lambda n: recorded[n])[:10]
    return {"entry": str(dest), "met_criterion": entry.training["met_criterion"], "steps": entry.training["steps"],
            "recorded_r2": {"min": min(recorded.values()), "median": statistics.median(recorded.values())},
            "affine_r2": {"min": round(min(affine.values()), 4), "median": round(statistics.median(affine.values()), 4)},
            "worst": [{"node": n, "recorded": recorded[n], "affine": round(affine[n], 4)} for n in worst],
            "loudness": loud}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--planted", default="large-circuit", help="a planted model, or KIND:ID (case:33)")
    args = parser.parse_args()
    print(json.dumps(measure(args.root, args.planted), indent=1))
