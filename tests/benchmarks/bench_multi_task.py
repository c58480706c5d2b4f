"""Multi-task bundles (planted.multi_task, issue 32 item 1): the battery of no-intervention looks
for every task of a trained bundle, on that task's inputs and on every task's inputs, beside the
same task trained alone (a single-task planted entry of another root, where there is one).

    python tests/benchmarks/bench_multi_task.py --root ROOT [--bundle mt-2x4] [--alone ROOT2] [--n 2000]
    python tests/benchmarks/bench_multi_task.py --checkpoint DIR --bundle mt-4x4 [--alone ROOT2]

Reads one trained view of the bundle (`zoo train planted mt-2x4.rare-feature --root ROOT`; every view
has the same weights) and the ground-truth verdicts its validation.json records for every task;
`--alone` reads the single-task entries (`zoo train planted rare-feature --root ROOT2`; for a case bundle,
`mt-case-33`, its case's own entry: `zoo train case 33 --root ROOT2`).
`--checkpoint` reads a bundle's training checkpoint instead (`<root>/entries/.planted-<view>.checkpoint`
of a run that has not met its criterion yet), with the head rescale the entry would get; such a model
has no ground-truth verdicts and is no entry. Prints JSON; not part of CI. The numbers go into issue
32's note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


ALONE = {"causal-bench": "causal-bench-4x4"}
"""A bundle task's single-task planted model where the names differ (mt-4x4's main task)."""


def _battery(model, tokens, mask, circuit) -> dict:
    from eval.core.looks import battery
    from siit.look_inputs import look_inputs

    report = battery(look_inputs(model, tokens, mask, circuit, "classification"), with_values=False)
    return {"max": report["max_separation"], "median": report["median_separation"],
            "apart": report["max_separation_apart"], "met": report["met"], "over_bound": report["over_bound"],
            "looks": {k: r["separation"] for k, r in report["looks"].items()}}


def _entry(root: Path, name: str, kind: str = "planted"):
    from siit.transformer import Transformer
    from zoo.high_level_source import resolve_case
    from zoo.realism_report import load_siit_entry

    case = resolve_case(kind, name)
    entry = load_siit_entry(root / "entries" / case.entry_name, case)
    return case, entry, Transformer.from_state_dict(entry.config, entry.state_dict)


def from_checkpoint(path: Path, bundle):
    """(step, model, Setup) of a bundle's training checkpoint, the model head-rescaled as its entry
    would be (the Setup on 256 training sequences: its validation pairs do not depend on them)."""
    import dataclasses as dc

    from planted import get_planted
    from siit.checkpoint import load_checkpoint
    from siit.config import TrainConfig
    from siit.optim import Adam
    from siit.reparametrize import rescale_heads
    from siit.train_setup import Trainee, prepare
    from siit.transformer import Transformer
    from zoo.multi_task_entry import training_task

    meta = json.loads((path / "state.json").read_text())
    config = TrainConfig(**{**meta["config"], "betas": tuple(meta["config"]["betas"])})
    s = prepare(training_task(get_planted(bundle.view_names[0])), dc.replace(config, n_train=256))
    trainee = Trainee(Transformer(s.low_config), len(s.targets.distractors) if s.targets else 0)
    optimizer = Adam(trainee.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    load_checkpoint(path, model=trainee, optimizer=optimizer, extra={})
    if config.rescale_heads:
        rescale_heads(trainee.model, s.corr.low, seed=s.case_seed, circuit=s.corr.aligned)
    return meta["step"], trainee.model, s


def run(root: Path | None, bundle_name: str, alone: Path | None, n: int, seed: int,
        checkpoint: Path | None = None) -> dict:
    import torch

    from planted.registry import get_bundle

    torch.set_num_threads(1)
    bundle = get_bundle(bundle_name)
    if checkpoint is not None:
        step, model, _ = from_checkpoint(checkpoint, bundle)
        trained, entry = f"checkpoint {checkpoint} at step {step}", None
    else:
        trained = next((v for v in bundle.view_names if (root / "entries" / f"planted-{v}").is_dir()), None)
        if trained is None:
            sys.exit(f"no trained view of {bundle_name} in {root}: zoo train planted {bundle.view_names[0]} "
                     f"--root {root}")
        _, entry, model = _entry(root, trained)
    every = bundle.task()
    mixed = every.encoding.encode(every.case.sample(n, seed))
    rows = []
    for k, view_name in enumerate(bundle.view_names):
        view = bundle.task(k)
        tokens, mask = view.encoding.encode(view.case.sample(n, seed))
        row = {"task": view_name, "circuit": list(view.graph.nodes),
               "ground_truth": None if entry is None else
               (entry.validation or {}).get("tasks", {}).get("views", {}).get(view_name),
               "own_inputs": _battery(model, tokens, mask, view.graph.nodes),
               "every_tasks_inputs": _battery(model, *mixed, view.graph.nodes)}
        single_task = _alone(bundle, k)
        if alone is not None and single_task is not None and \
                (alone / "entries" / f"{single_task[0]}-{single_task[1]}").is_dir():
            case, single_entry, single = _entry(alone, single_task[1], single_task[0])
            row["alone"] = _battery(single, *single_entry.encoding.encode(case.sample(n, seed)),
                                    single_entry.circuit.nodes)
        rows.append(row)
    return {"bundle": bundle_name, "entry": trained, "n": n, "seed": seed, "tasks": rows,
            "median_over_tasks": {where: {"max": statistics.median(r[where]["max"] for r in rows),
                                          "median": statistics.median(r[where]["median"] for r in rows)}
                                  for where in ("own_inputs", "every_tasks_inputs")}}


def _alone(bundle, k: int) -> tuple[str, str] | None:
    """(kind, id) of view k's task trained alone: a case bundle's main task is the case's own entry
    (planted.case_bundles; its side tasks have none), a planted bundle's task its family model."""
    if hasattr(bundle, "main_key"):
        return ("case", bundle.case.id) if k == 0 else None
    key = bundle.parts[k].key
    return "planted", ALONE.get(key, key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", type=Path, help="a zoo root with a trained view of the bundle")
    where.add_argument("--checkpoint", type=Path, help="a bundle's training checkpoint directory")
    parser.add_argument("--bundle", default="mt-2x4")
    parser.add_argument("--alone", type=Path, default=None, help="a root with the single-task planted entries")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(run(args.root, args.bundle, args.alone, args.n, args.seed, args.checkpoint), indent=1))


if __name__ == "__main__":
    main()
