"""The model arithmetic exact ACDC and exact edge patching must do, measured, against the time they
take: how close each is to the floor a CPU sets, and what that floor is on a 12x12 model. As JSON.

    python tests/benchmarks/bench_arithmetic_floor.py [--sizes 6x4 8x8] [--project 12x12] [--n 32]
        [--threads 1] [--methods acdc edge_patching edge_sp] [--allocator zoo|system] [--out floor.json]

On the random models of bench_edge_methods.py, each block of the model counts the rows it runs
(a forward hook on every block; passes written out by eval.patching.bare, which run no block
module, are counted at its entry points): a block run on r rows of p positions is r·block_flops(...) of
arithmetic (bench_pass_rows.block_flops: the q/k/v/o and MLP products and attention, 2 per
multiply-add). Measured per size:

- every method: its floor, the arithmetic at the rate a bare block runs at on a pass's rows
  (`block_rate`, measured right after the method: the machine is shared, so the load it ran
  under is the method's), `floor_ratio` its CPU time over that, and the load average;
- `edge_sp` (with `--methods`): its steps run every block forward and backward (to the masks;
  the weights take no gradient), so that arithmetic counts at the rate a bare block runs its
  forward and its backward to its input (`block_forward_backward_gflop_per_s`, forward FLOP over
  the time of both): the floor of the method's own optimisation, without the edge mixing; and
  the edge mixing's own arithmetic (`edge_mixing_gflop`), at the rate one mixing product and its
  backward run at here, with the floor that adds it (`floor_with_mixing_s`, `_ratio`);
- `acdc`: its passes, rows per pass (n per distinct τ circuit), blocks per pass, the arithmetic,
  and the rate it runs at (arithmetic / CPU time); written-out passes also count the arithmetic of
  their edge sums (`edge_sum_gflop`, the weights each group's sums multiply by, not in the floor);
- `edge_patching` (batched, from each edge's reader block on) and `edge_patching_loop` (one full
  forward per edge): the arithmetic each does, its ratio (the speedup batching gives when both run
  at one rate per FLOP), the measured time ratio, and the ratio at the rates a bare block runs at
  on the loop's n rows and on a batched pass's rows (`block_rate`): batching beats the arithmetic
  ratio only where many rows run faster per FLOP than few, as on a GPU, not on a CPU core.

`--project` builds the model of that size and counts exactly the blocks ACDC's sweep runs per edge
(from the edge's reader block on; the logits' edges from the last block), times the mean distinct
circuits per pass of the largest measured size: the arithmetic of exact ACDC at the default τ grid
and n. It is divided by two rates measured here for that model's shapes: a bare block (no hooks,
a written-out softmax) on a pass's rows, and the bare matrix product of a block's largest shape
(an upper bound no block reaches), for one core and for ideal scaling over two. The edge sums a
pass also does (removed edges from recomputed writers: eval.patching.bare, or through hooks
eval.patching.edge_groups) are not in the floor: the floor is the model's own arithmetic alone.
Rates and times are CPU time with --threads torch threads: the "1 core" figures hold for the
default, one. The mean circuits per pass is the mean rows of a pass reaching the logits over n,
counting ACDC's few setup passes of n rows, so it is a slight underestimate.

Methods and bare blocks run under one allocator setting (--allocator, bench_edge_methods.use_allocator):
by default as a `zoo` command's process, whose malloc keeps freed memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


class BlockMeter:
    """Rows run by the blocks of a model, and rows of the passes reaching the unembedding. Passes
    written out (eval.patching.bare) run no block module: their entry points are wrapped instead."""

    def __init__(self, model: Any, flops_per_row: float) -> None:
        try:
            from eval.patching import bare
        except ImportError:  # a checkout from before the written-out passes (a "before" measurement)
            bare = None

        self.flop, self.row_blocks, self.rows = 0.0, 0, 0
        self.grad_flop = 0.0  # of blocks whose output a backward pass may differentiate (edge SP's steps)
        self.sum_flop = 0.0  # of written-out passes' edge sums (not the model's: not in the floor)
        self.per_row = flops_per_row
        self.handles = [block.register_forward_hook(self._block) for block in model.blocks]
        self.handles.append(model.unembed.register_forward_hook(self._unembed))
        self.bare, self.bare_entries = bare, {name: getattr(bare, name) for name in getattr(bare, "ENTRIES", ())}
        for name, fn in self.bare_entries.items():
            setattr(bare, name, self._counted(fn))

    def _counted(self, fn: Any) -> Any:
        def run(bm: Any, p: Any, k: int, *args: Any, **kwargs: Any) -> Any:
            rows = k * int(p.resid.shape[0])
            self.row_blocks += rows * (bm.n_layers - p.start)
            self.flop += rows * (bm.n_layers - p.start) * self.per_row
            self.sum_flop += 2.0 * p.resid.numel() * self._summed(p)
            return fn(bm, p, k, *args, **kwargs)
        return run

    @staticmethod
    def _summed(p: Any) -> int:
        """Weights a pass's edge sums multiply its writers' differences by (per element of one
        difference): each group's [k, readers or distinct rows, writers] as eval.patching.bare sums them."""
        dense = sum(int(w.numel()) for key, w in p.weights.items() if key not in p.packed)
        return dense + sum(int(pk.rows.numel()) for pk in p.packed.values() if pk is not None and pk.rows is not None)

    def _block(self, module: Any, args: Any, output: Any) -> None:
        rows = int(output.shape[0])
        self.row_blocks += rows
        self.flop += rows * self.per_row
        if output.requires_grad:
            self.grad_flop += rows * self.per_row

    def _unembed(self, module: Any, args: Any, output: Any) -> None:
        self.rows += int(output.shape[0])

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        for name, fn in self.bare_entries.items():
            setattr(self.bare, name, fn)


def metered(model: Any, task: Any, graph: Any, key: str, flops_per_row: float) -> dict[str, Any]:
    """bench_edge_methods.measure (time, passes) of one method or the per-edge loop, with a
    BlockMeter: rows per pass, blocks per pass, arithmetic and its rate; and the floor: that
    arithmetic at the rate a bare block runs at on a pass's rows, measured right after the method
    (the machine is shared: its load then is the method's), and the method's CPU time over it.
    Blocks run under autograd (subnetwork probing's steps) count at the rate a bare block runs its
    forward and its backward to the input together (the weights need no gradient): their floor is
    forward and backward."""
    from bench_edge_methods import measure

    meter = BlockMeter(model, flops_per_row)
    row = measure(model, task, graph, key)
    meter.close()
    passes = max(1, row["forward"])
    rows_per_pass = meter.rows / passes
    rate, _ = block_rate(model.cfg, max(1, round(rows_per_pass)), int(task.tokens.shape[1]))
    floor = (meter.flop - meter.grad_flop) / rate
    extra: dict[str, Any] = {}
    if meter.grad_flop:
        both, _ = block_rate(model.cfg, max(1, round(rows_per_pass)), int(task.tokens.shape[1]), backward=True)
        floor += meter.grad_flop / both
        extra = {"backward_passes": row["backward"], "gflop_with_backward": round(meter.grad_flop / 1e9, 1),
                 "block_forward_backward_gflop_per_s": round(both / 1e9, 1)}
        if key == "edge_sp":
            extra.update(edge_mixing(model.cfg, graph, task, meter, row, floor))
    return {"method": key, "wall_s": round(row["wall_s"], 2), "cpu_s": round(row["cpu_s"], 2),
            "passes": row["forward"], "rows_per_pass": round(rows_per_pass, 1),
            "blocks_per_pass": round(meter.row_blocks / max(1, meter.rows), 2),
            "gflop": round(meter.flop / 1e9, 1), "gflop_per_s": round(meter.flop / row["cpu_s"] / 1e9, 1),
            "block_gflop_per_s": round(rate / 1e9, 1), "floor_s": round(floor, 2),
            "floor_ratio": round(row["cpu_s"] / floor, 2), **extra,
            **({"edge_sum_gflop": round(meter.sum_flop / 1e9, 1)} if meter.sum_flop else {}), "loadavg": _loadavg()}


def edge_mixing(cfg: Any, graph: Any, task: Any, meter: BlockMeter, row: dict[str, Any], floor: float) -> dict[str, Any]:
    """Edge SP's other arithmetic: every q/k/v edge mixes its sender into its reader on each row and
    position of a step (z·a + (1 - z)·a' over d_model), forward and backward to both the masks and
    the senders, 3 · 2 FLOP per multiply-add; a block-level floor leaves it out, and it grows with the
    edges (L²H²) where the blocks grow with L·H². Counted on the rows of the steps' passes, at the
    rate of one such product and its backward measured here (`mixing_rate`); the floor with it."""
    edges, pos, d = len(graph.at("qkv").edges), int(task.tokens.shape[1]), cfg.d_model
    rows = meter.grad_flop / meter.per_row / cfg.n_layers  # rows of the passes a backward runs through
    flop = 6.0 * edges * rows * pos * d
    blocks = max(1, round(rows / max(1, row["backward"]) / task.n))  # λ blocks a step stacks
    rate = mixing_rate(cfg, task.n, pos, blocks)
    with_mixing = floor + flop / rate
    return {"edge_mixing_gflop": round(flop / 1e9, 1), "edge_mixing_gflop_per_s": round(rate / 1e9, 1),
            "floor_with_mixing_s": round(with_mixing, 2), "floor_with_mixing_ratio": round(row["cpu_s"] / with_mixing, 2)}


def mixing_rate(cfg: Any, n: int, pos: int, blocks: int) -> float:
    """FLOP/s of one edge-mixing product of a middle layer's q/k/v readers and its backward:
    weights [blocks, 3H, S] (S: half the model's writers) times the senders' differences [blocks, S,
    n·pos·d_model], both taking a gradient, as subnetwork probing's masks and the model's
    activations do."""
    import torch

    H, d = cfg.n_heads, cfg.d_model
    S = max(1, cfg.n_layers * (H + 1) // 2)
    g = torch.Generator().manual_seed(0)
    W = torch.rand(blocks, 3 * H, S, generator=g).requires_grad_()
    D = torch.randn(blocks, S, n * pos * d, generator=g).requires_grad_()
    up = torch.randn(blocks, 3 * H, n * pos * d, generator=g)

    def step() -> None:
        torch.autograd.backward(torch.bmm(W, D), up)
        W.grad = D.grad = None

    return 3 * 2 * blocks * 3 * H * S * n * pos * d / median_time(step)


def _loadavg() -> str:
    """The machine's load average (1, 5, 15 min) when a row was measured: it is shared."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def sweep_blocks(graph: Any, n_layers: int) -> int:
    """Blocks ACDC's sweep runs over its edges, one pass each: from the reader's block on (the
    logits' edges from the last block, as eval.methods.acdc_sweep starts them)."""
    from eval.methods.edge_patching import reader_layer

    return sum(n_layers - min(reader_layer(dst, n_layers), n_layers - 1) for _, dst in graph.at("qkv").edges)


def median_time(fn: Any, repeats: int = 5) -> float:
    times = []
    for i in range(repeats + 1):
        t0 = time.process_time()
        fn()
        if i:  # the first call warms up
            times.append(time.process_time() - t0)
    return statistics.median(times)


def block_rate(cfg: Any, rows: int, pos: int, backward: bool = False) -> tuple[float, float]:
    """FLOP/s of a bare transformer block of the model's shapes on `rows` rows (one product for q,
    k and v, a written-out softmax, the GELU MLP; no hooks, no patching), and of the bare matrix
    product of its largest shape on as many positions: what a block can run at here. backward:
    the block's forward FLOP over the time of its forward and its backward to the input."""
    import math

    import torch

    from bench_pass_rows import block_flops

    d, H, dh, m = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, pos, d, generator=g)
    W_qkv, W_o = torch.randn(d, 3 * H * dh, generator=g) / d ** .5, torch.randn(H * dh, d, generator=g) / d ** .5
    W_in, W_out = torch.randn(d, m, generator=g) / d ** .5, torch.randn(m, d, generator=g) / m ** .5
    causal = torch.full((pos, pos), float("-inf")).triu(1)

    def block() -> torch.Tensor:
        qkv = (x.reshape(-1, d) @ W_qkv).view(rows, pos, 3, H, dh).permute(2, 0, 3, 1, 4)  # [3, rows, H, pos, dh]
        s = (qkv[0] @ qkv[1].transpose(-1, -2)) / math.sqrt(dh) + causal
        s = (s - s.amax(-1, keepdim=True)).exp()
        z = ((s / s.sum(-1, keepdim=True)) @ qkv[2]).transpose(1, 2).reshape(-1, H * dh)
        resid = x.reshape(-1, d) + z @ W_o
        return resid + torch.nn.functional.gelu(resid @ W_in) @ W_out

    a, b = x.reshape(-1, d), W_in
    per_row = block_flops(d, m, H, dh, pos)
    grad = torch.randn(rows * pos, d, generator=g)
    x.requires_grad_(backward)  # the weights never take a gradient

    def timed() -> Any:
        return torch.autograd.grad(block(), x, grad) if backward else block()

    return rows * per_row / median_time(timed), 2.0 * rows * pos * d * m / median_time(lambda: a @ b)


def project(size: str, circuits: float, n: int) -> dict[str, Any]:
    """Exact ACDC's model arithmetic on a model of this size, and the time it takes at the rates
    this machine runs bare blocks and bare matrix products of its shapes at."""
    from bench_edge_methods import random_model
    from bench_pass_rows import block_flops

    from eval.core.graph import graph_of

    layers, heads = (int(x) for x in size.split("x"))
    model = random_model(layers, heads)
    cfg, graph = model.cfg, graph_of(model)
    per_row = block_flops(cfg.d_model, cfg.d_mlp, heads, cfg.d_head, 10)  # random_task's 10 positions
    edges = len(graph.at("qkv").edges)
    blocks = sweep_blocks(graph, layers)
    flop = blocks * circuits * n * per_row
    model_rate, mm_rate = block_rate(cfg, max(1, round(circuits * n)), 10)
    return {"model": size, "qkv_edges": edges, "n": n, "circuits_per_pass": round(circuits, 2),
            "blocks_per_edge": round(blocks / edges, 2), "gflop": round(flop / 1e9),
            "block_gflop_per_s": round(model_rate / 1e9, 1), "matmul_gflop_per_s": round(mm_rate / 1e9, 1),
            "s_at_block_rate_1_core": round(flop / model_rate), "s_at_block_rate_2_cores": round(flop / model_rate / 2),
            "s_at_matmul_rate_2_cores": round(flop / mm_rate / 2)}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_edge_methods import ALLOCATOR_HELP, ALLOCATORS

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["6x4", "8x8"], help="LAYERSxHEADS measured")
    parser.add_argument("--project", default="12x12", help="LAYERSxHEADS to project ACDC's arithmetic to")
    parser.add_argument("--n", type=int, default=32, help="clean inputs (and counterfactuals)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--loop-sizes", nargs="+", default=["6x4"], help="sizes the per-edge loop runs at")
    parser.add_argument("--methods", nargs="+", default=["acdc", "edge_patching"],
                        help="built-in methods measured at every size (edge_sp: its floor is forward and backward)")
    parser.add_argument("--allocator", choices=ALLOCATORS, default="zoo", help=ALLOCATOR_HELP)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()

    import torch

    from bench_edge_methods import METHODS, random_model, random_task, use_allocator
    from bench_pass_rows import block_flops

    from eval.core.graph import graph_of

    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; built-in: {', '.join(METHODS)}")
    torch.set_num_threads(args.threads)
    # the methods and the bare blocks of the floor run under the same allocator
    report: dict[str, Any] = {"torch_threads": args.threads, "n": args.n, "allocator": use_allocator(args.allocator),
                              "measured": []}
    circuits = None
    for size in args.sizes:
        layers, heads = (int(x) for x in size.split("x"))
        model = random_model(layers, heads)
        task, graph, cfg = random_task(model, args.n), graph_of(model), model.cfg
        pos = int(task.tokens.shape[1])
        per_row = block_flops(cfg.d_model, cfg.d_mlp, heads, cfg.d_head, pos)
        rows = [metered(model, task, graph, key, per_row)
                for key in (*args.methods, *(["edge_patching_loop"] if size in args.loop_sizes else []))]
        entry: dict[str, Any] = {"model": size, "qkv_edges": len(graph.at("qkv").edges),
                                 "sweep_blocks_per_edge": round(sweep_blocks(graph, layers) / len(graph.at("qkv").edges), 2),
                                 "rows": rows}
        by = {r["method"]: r for r in rows}
        if "edge_patching_loop" in by and "edge_patching" in by:
            loop, batched = by["edge_patching_loop"], by["edge_patching"]
            entry["edge_patching_arithmetic_ratio"] = round(loop["gflop"] / batched["gflop"], 2)
            entry["edge_patching_time_ratio"] = round(loop["cpu_s"] / batched["cpu_s"], 2)
            # Bare blocks at the loop's and the batched passes' row counts: batching beats the loop
            # by more than the arithmetic ratio only if many rows run faster per FLOP than few.
            few, _ = block_rate(cfg, args.n, pos)
            many, mm_rate = block_rate(cfg, round(batched["rows_per_pass"]), pos)
            entry["block_gflop_per_s"] = {"loop_rows": round(few / 1e9, 1), "batched_rows": round(many / 1e9, 1)}
            entry["matmul_gflop_per_s_batched_rows"] = round(mm_rate / 1e9, 1)
            entry["edge_patching_ratio_at_block_rates"] = round(entry["edge_patching_arithmetic_ratio"] * many / few, 2)
        if "acdc" in by:
            circuits = by["acdc"]["rows_per_pass"] / args.n
        report["measured"].append(entry)
        print(json.dumps(entry), file=sys.stderr, flush=True)
    if args.project and circuits is not None:
        report["projected_acdc"] = project(args.project, circuits, args.n)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
