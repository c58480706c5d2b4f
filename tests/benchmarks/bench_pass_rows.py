"""What one patched forward pass costs per row: is a pass bound by its rows' arithmetic or by fixed
overhead? As JSON.

    python tests/benchmarks/bench_pass_rows.py [--size 12x12] [--n 32] [--blocks 1 6 12 24]
        [--start 7] [--repeats 5]

On the random model of bench_edge_methods.py (`--size LxH`), one `Adapter.run` with one edge
patched, started at block `--start` from the clean state, as ACDC's and edge patching's passes
are, with k blocks of n rows for each k in --blocks. Prints the median CPU time of `--repeats`
passes per k, the time per n rows, and the arithmetic rate (multiply-adds of the blocks run,
counted from the model's shapes). A time per n rows that stays flat as k grows means the pass is
bound by its rows (arithmetic and memory), not by Python or hook overhead, so batching more
rows into fewer passes cannot make it cheaper: only less arithmetic can.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def block_flops(d_model: int, d_mlp: int, heads: int, d_head: int, pos: int) -> float:
    """Floating-point operations of one block on one row of `pos` positions (2 per multiply-add)."""
    qkvo = 4 * d_model * heads * d_head  # W_Q, W_K, W_V, W_O
    attention = 2 * heads * pos * d_head  # scores and the weighted sum, per position
    return 2.0 * pos * (qkvo + attention + 2 * d_model * d_mlp)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="12x12", help="LAYERSxHEADS of the random model")
    parser.add_argument("--n", type=int, default=32, help="rows per block (task inputs)")
    parser.add_argument("--blocks", type=int, nargs="+", default=[1, 6, 12, 24], help="row blocks per pass")
    parser.add_argument("--start", type=int, default=None, help="block the pass starts at (default: the middle)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_edge_methods import random_model, random_task

    from eval.patching.ablation import make_context
    from eval.methods.edge_patching import repeat_rows
    from eval.core.graph import graph_of

    torch.set_num_threads(1)
    layers, heads = (int(x) for x in args.size.split("x"))
    start = layers // 2 + 1 if args.start is None else args.start
    model = random_model(layers, heads)
    task = random_task(model, args.n)
    ctx = make_context(model, task, graph_of(model), "resample")
    cfg = model.cfg
    sender, reader = f"a{start - 2}.h0", f"a{start}.h1<q>"
    flops = (layers - start) * block_flops(cfg.d_model, cfg.d_mlp, heads, cfg.d_head, task.tokens.shape[1])
    rows = []
    for k in args.blocks:
        tokens, mask = repeat_rows(task.tokens, k), repeat_rows(task.mask, k)
        reference = {sender: repeat_rows(ctx.reference[sender], k)}
        times = []
        with torch.no_grad():
            for i in range(args.repeats + 1):
                t0 = time.process_time()
                ctx.adapter.run(tokens, mask, reference=reference, edges={(sender, reader): 1.0},
                                start=ctx.starts[start])
                if i:  # the first pass warms up
                    times.append(time.process_time() - t0)
        med = statistics.median(times)
        rows.append({"blocks": k, "rows": k * args.n, "cpu_ms": round(1e3 * med, 2),
                     "cpu_ms_per_block": round(1e3 * med / k, 2),
                     "gflop_per_s": round(k * args.n * flops / med / 1e9, 1)})
        print(f"k={k}: {rows[-1]}", file=sys.stderr, flush=True)
    print(json.dumps({"size": args.size, "d_model": cfg.d_model, "n": args.n, "start_block": start,
                      "blocks_run": layers - start, "torch_threads": 1, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
