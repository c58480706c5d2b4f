"""Per-position accuracy of a training checkpoint's clean model, on its own training pool and on a fresh
pool: where a run that will not meet its criterion misses, and whether it overfits there.

    python tests/benchmarks/bench_position_accuracy.py --planted NAME --checkpoint DIR [--fresh-seed 123]

DIR is a run's checkpoint (`ROOT/entries/.planted-NAME.checkpoint`, written while `zoo train planted NAME`
runs); the pools are drawn as that run draws them (its config's n_train and seed; the fresh pool with
--fresh-seed instead). Prints JSON: per labelled position, how many pool rows reach it and the accuracy there.
A position at 1.0 on the training pool and lower on fresh inputs is overfitted; one low on both is short of
data or steps. planted large-circuit's last position (reached by 9% of inputs when lengths were uniform: 0.80
on the training pool, 0.49 fresh after 4130 steps) is what this found (docs/results.md). Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch


def position_accuracy(model: torch.nn.Module, data) -> dict:
    """{"overall": accuracy, "positions": {pos: {"rows": n, "accuracy": a}}} of the clean model on data."""
    with torch.no_grad():
        logits, _ = model(data.tokens, data.mask, None)  # [N, T, classes]
    labelled = data.label_mask.bool()  # [N, T]
    ok = logits.argmax(-1) == data.labels
    per = {}
    for t in range(labelled.shape[1]):
        rows = labelled[:, t]
        if rows.any():
            per[t] = {"rows": int(rows.sum()), "accuracy": round(float(ok[rows, t].double().mean()), 4)}
    return {"overall": round(float(ok[labelled].double().mean()), 4), "positions": per}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--planted", required=True, help="the planted model the run trains (e.g. large-circuit)")
    ap.add_argument("--checkpoint", type=Path, required=True, help="the run's checkpoint directory")
    ap.add_argument("--fresh-seed", type=int, default=123, help="seed of the fresh pool (default 123)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args(argv)
    from planted import get_planted
    from siit.checkpoint import load_checkpoint
    from siit.config import TrainConfig
    from siit.data import make_dataset, pool_seed
    from siit.optim import Adam
    from siit.train_setup import Trainee, prepare
    from siit.transformer import Transformer

    torch.set_num_threads(args.threads)
    state = args.checkpoint / "state.json"
    if not state.is_file():
        print(f"error: {args.checkpoint} holds no checkpoint (state.json)", file=sys.stderr)
        return 2
    meta = json.loads(state.read_text())
    config = TrainConfig(**{**meta["config"], "betas": tuple(meta["config"]["betas"])})
    task = get_planted(args.planted)
    s = prepare(task, config)  # s.train_set: the run's own pool, drawn as training draws it
    trainee = Trainee(Transformer(s.low_config), len(s.targets.distractors) if s.targets else 0,
                      len(s.components.node) if s.components is not None else 0)
    load_checkpoint(args.checkpoint, model=trainee, extra={},
                    optimizer=Adam(trainee.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay))
    # the pool a run with seed --fresh-seed would train on
    fresh = make_dataset(task, s.high, config.n_train, seed=pool_seed(args.fresh_seed, "train"))
    out = {"planted": args.planted, "checkpoint": str(args.checkpoint), "step": meta["step"],
           "training_pool": position_accuracy(trainee.model, s.train_set),
           "fresh": position_accuracy(trainee.model, fresh)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
