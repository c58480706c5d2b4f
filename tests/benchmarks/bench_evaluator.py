"""Cost of one periodic validation during training (siit.metrics.Evaluator.evaluate) on the planted
CAUSAL-BENCH models, against the plain computation it replaces, as JSON.

    python tests/benchmarks/bench_evaluator.py [--sizes 2x2 4x4 6x6 8x8] [--repeats 3]

For each size: the training setup of `zoo train planted causal-bench-LxH` (default TrainConfig: 512
validation inputs), a model with the trainer's initial weights, and the CPU time (one torch thread)
of
- `batched`: Evaluator.run_groups as training runs it (every group starts at its first patched
  block from the clean residual stream and reads one shared copy of the source activations);
- `plain`: the same groups stacked the same way, each run from the embedding with the source
  activations copied per group (what run_groups did before);
both giving the same predictions (checked). Medians over --repeats; `speedup` is plain / batched.
Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def plain_run_groups(ev, model, masks: torch.Tensor) -> torch.Tensor:
    """The reference: every group from the embedding, source activations copied per group."""
    from siit.interventions import interchange, node_activations, repeat_rows
    from siit.losses import predictions
    from siit.metrics import _MAX_ROWS

    d, n = ev.data, len(ev.data)
    source_acts = node_activations(model, d.tokens, d.mask, d.present)[:, ev.sources]
    out = []
    with torch.no_grad():
        for start in range(0, masks.shape[0], max(1, _MAX_ROWS // n)):
            chunk = masks[start:start + max(1, _MAX_ROWS // n)]
            g = chunk.shape[0]
            present = None if d.present is None else repeat_rows(d.present, g)
            logits = interchange(model, repeat_rows(d.tokens, g), repeat_rows(d.mask, g),
                                 repeat_rows(source_acts, g, dim=1), chunk.repeat_interleave(n, dim=0), present)
            out.append(predictions(logits, ev.task_kind).reshape(g, n, -1))
    return torch.cat(out)


def measure(size: str, repeats: int) -> dict:
    from planted import get_planted
    from siit.config import ArchConfig, TrainConfig
    from siit.high_level import as_task
    from siit.trainer import prepare
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    config = TrainConfig()
    s = prepare(as_task(get_planted(f"causal-bench-{size}")), config, ArchConfig())
    model = Transformer(s.low_config)
    init_weights(model, torch.Generator().manual_seed(config.seed), output_scale=config.init_output_scale)
    ev = s.evaluator
    _, masks = ev.groups()
    times: dict[str, list[float]] = {"batched": [], "plain": []}
    results = {}
    for _ in range(repeats):
        for name, fn in (("batched", lambda: ev.run_groups(model, masks)),
                         ("plain", lambda: plain_run_groups(ev, model, masks))):
            cpu = time.process_time()
            results[name] = fn()
            times[name].append(time.process_time() - cpu)
    if not torch.equal(results["batched"], results["plain"]):
        raise AssertionError(f"{size}: batched and plain predictions differ")
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"size": size, "groups": int(masks.shape[0]), "rows": len(ev.data),
            "batched_cpu_s": round(med["batched"], 3), "plain_cpu_s": round(med["plain"], 3),
            "speedup": round(med["plain"] / med["batched"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["2x2", "4x4", "6x6", "8x8"], help="LxH of causal-bench-LxH")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(size, args.repeats) for size in args.sizes]
    print(json.dumps({"torch_threads": 1, "repeats": args.repeats, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
