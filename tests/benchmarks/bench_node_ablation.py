"""What one round of node-ablation passes costs on a planted model's architecture: eval.patching.ablation.node_metrics
over every single-component removal, as CAUSAL-BENCH's greedy reduction (causal optimality, run for every
method's identified set by `zoo eval`), the ablation scan and greedy search run them; one JSON object.

On planted large-circuit (99 heads, d_model 198) a greedy reduction from a method's identified set of about
100 components runs such rounds until the faithfulness falls below 0.85: tens of rounds of 100 removals, so
`zoo eval --method random` spent more than 15 minutes in it there. The model is the architecture at its seeded
initial weights through the installed TransformerLens (what `zoo eval` scores), on `--n` task inputs; CPU time
(one torch thread) of one round, median of `--repeats`, and the behaviour values' checksum (the same numbers
before and after a change that should not move them).

Usage: python tests/benchmarks/bench_node_ablation.py [--planted large-circuit] [--n 100] [--repeats 3]
[--compare DIR]. --compare DIR measures the zoo checked out in DIR (`git archive REV | tar -x -C DIR`) too,
in its own process, alternating with this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def measure(planted: str, n: int, repeats: int) -> dict[str, Any]:
    """One round of single-component removals on `planted`'s architecture, in this process."""
    import torch

    from eval.core.graph import graph_of
    from eval.core.tlens import build_hooked
    from eval.patching.ablation import behaviour_tensor, make_context, node_metrics
    from eval.patching.task import make_task
    from planted.registry import get_planted
    from siit.config import ArchConfig
    from siit.high_level import as_task
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    import eval.core.model_config as model_config

    # a checkout from before large-circuit loaded (at most 64 heads) measures it under today's bound
    model_config._INT_FIELDS["n_heads"] = (1, max(model_config.MAX_HEADS, 128))
    torch.set_num_threads(1)
    task = as_task(get_planted(planted))
    config = task.low_level_config(ArchConfig())
    model = Transformer(config)
    init_weights(model, torch.Generator().manual_seed(0))
    hooked = build_hooked(config, {k: v.detach() for k, v in model.state_dict().items()})
    data = make_task(case=task.case, encoding=task.encoding, reference=task.high_level(), n=n, seed=0)
    graph = graph_of(hooked)
    ctx = make_context(hooked, data, graph)
    removals = [[c] for c in graph.components]
    metric = lambda logits: behaviour_tensor(data, logits, "logit_diff")  # noqa: E731
    times, values = [], []
    for _ in range(repeats):
        start = time.process_time()
        values = node_metrics(ctx, removals, metric)
        times.append(time.process_time() - start)
    return {"components": len(removals), "n": n, "round_cpu_s": round(statistics.median(times), 3),
            "round_cpu_s_all": [round(t, 3) for t in times], "checksum": round(sum(values), 6)}


def _child(checkout: Path, planted: str, n: int, repeats: int) -> dict[str, Any]:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
            "from bench_node_ablation import measure; print(json.dumps(measure(sys.argv[3], *map(int, sys.argv[4:6]))))")
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", code, str(checkout), str(Path(__file__).parent), planted, str(n),
                          str(repeats)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--planted", default="large-circuit")
    parser.add_argument("--n", type=int, default=100, help="task inputs (zoo eval's --n; the failure-mode bench's 100)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", type=Path, default=None, help="a checkout to measure too (before)")
    args = parser.parse_args(argv)
    checkouts = {"this": ROOT} if args.compare is None else {"before": args.compare, "this": ROOT}
    result = {"planted": args.planted, "configs": {name: _child(path, args.planted, args.n, args.repeats)
                                                    for name, path in checkouts.items()}}
    if args.compare is not None:
        before, after = result["configs"]["before"], result["configs"]["this"]
        result["before_over_this"] = round(before["round_cpu_s"] / after["round_cpu_s"], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
