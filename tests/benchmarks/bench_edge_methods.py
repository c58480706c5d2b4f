"""Wall time and forward / backward passes of every built-in method on random models, as JSON, and
a log-log plot of cost against q/k/v edge count.

    python tests/benchmarks/bench_edge_methods.py [--sizes 2x2 4x4 6x4 8x8 12x12] [--n 32]
        [--methods ...] [--out costs.json] [--budget-s 600] [--plot costs.png]
        [--method-option acdc.taus=0.01,0.001,0.1 ...]   # as zoo eval's (eval.methods.options)
    python tests/benchmarks/bench_edge_methods.py --plot costs.png --from costs.json   # plot only
    python tests/benchmarks/bench_edge_methods.py --entry ROOT/entries/case-19 [--n 100]  # a trained entry

Models are random (no LayerNorm, GELU, d_head 8, d_model = 8·heads, d_mlp = 4·d_model, 10
positions); labels are the model's own argmax on clean and resampled inputs. 6x4 has MIB's 1108
q/k/v edges; 12x12 (d_model 96) has 32,491. Passes are counted with a forward hook on the
unembedding (one per pass that reaches the logits, whatever its rows and its first block) and a
gradient hook on its logits (one per backward pass). `edge_patching_loop` is exact edge patching
with one full forward pass per edge (n rows, from the embedding, no start state), the naive loop
the batched version replaces; `speedup` is its wall time over the batched one.

--allocator zoo (the default) runs the methods as a `zoo` command's process does, with malloc
keeping freed memory (zoo.cli.keep_freed_memory); --allocator system leaves glibc's defaults, as in
a Python session that imports the library. Recorded in the JSON.

`cpu_s` is the process's CPU time: with one torch thread it is what the run takes on a core of
its own, where `wall_s` also counts waiting for a core on a shared machine. Plots and
extrapolations use cpu_s.

--entry measures a trained (or planted) entry instead of random models, on the task `zoo eval`
builds for it (the case's sampler, resampled counterfactuals, reference labels; seed 0).

Sizes run smallest first; with --budget-s, a method whose cost extrapolated from the smaller sizes
(a straight line through its last two cpu_s points in log-log) exceeds the budget is not run at a
size and its row says `"extrapolated_s"` instead of `"wall_s"`. --out is rewritten after every method, so
an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ALLOCATORS = ("zoo", "system")
ALLOCATOR_HELP = ("zoo (default): malloc keeps freed memory, as a `zoo` command's process does "
                  "(zoo.cli.keep_freed_memory); system: glibc's defaults, as a Python session that imports the library")


def use_allocator(name: str) -> str:
    """Set this process's malloc as `name` says (ALLOCATORS), before any method runs; returns it for
    the report. Methods run 10^4 passes that make and drop tensors of megabytes: with glibc's
    defaults each is mapped afresh and its pages faulted in again (6.0 million minor faults in an
    8x8 ACDC, against about 40 thousand as `zoo` runs it), so the figure depends on the setting."""
    if name == "zoo":
        from zoo.cli import keep_freed_memory

        keep_freed_memory()
    return name


METHODS = ("edge_patching", "eap", "eap_ig_inputs", "eap_ig_activations", "acdc", "node_sp", "edge_sp", "ifr",
           "ensemble", "activation_patching", "gradient_attribution", "ablation_scan", "greedy", "random")


@dataclasses.dataclass
class Counter:
    """Forward and backward passes through one model."""

    forward: int = 0
    backward: int = 0

    def attach(self, model: Any) -> Any:
        # On the unembedding: TransformerLens' run_with_hooks calls model.forward, not the model.
        def hook(module: Any, args: Any, output: Any) -> None:
            self.forward += 1
            if getattr(output, "requires_grad", False):
                output.register_hook(lambda grad: self._backward())

        return model.unembed.register_forward_hook(hook)

    def _backward(self) -> None:
        self.backward += 1


def random_model(layers: int, heads: int, seed: int = 0) -> Any:
    import torch

    from eval.core.tlens import build_hooked, hooked_config
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    d_model = 8 * heads
    config = hooked_config(n_layers=layers, d_model=d_model, n_heads=heads, d_head=8, d_mlp=4 * d_model,
                           d_vocab=20, d_vocab_out=10, n_ctx=10, causal=True, act_fn="gelu")
    model = Transformer(config)
    init_weights(model, torch.Generator().manual_seed(seed))
    return build_hooked(config, {k: v.clone() for k, v in model.state_dict().items()})


def random_task(model: Any, n: int, seed: int = 0) -> Any:
    import torch

    from eval.patching.task import TaskData

    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 20, (2, n, 10), generator=gen)
    mask = torch.ones(n, 10, dtype=torch.long)
    with torch.no_grad():
        labels = [model(tokens[i], attention_mask=mask).argmax(-1) for i in range(2)]
    positions = mask.bool().clone()
    positions[:, 0] = False
    return TaskData(tokens=tokens[0], mask=mask, cf_tokens=tokens[1], cf_mask=mask.clone(), labels=labels[0],
                    cf_labels=labels[1], positions=positions, task_kind="classification", seed=seed)


def edge_patching_loop(model: Any, task: Any, graph: Any) -> dict[tuple[str, str], float]:
    """Exact edge patching, one full forward pass per edge: what `edge_patching` must equal."""
    import torch

    from eval.patching.ablation import behaviour, make_context

    ctx = make_context(model, task, graph)
    with torch.no_grad():
        clean = behaviour(task, ctx.forward())
        return {e: clean - behaviour(task, ctx.adapter.run(task.tokens, task.mask, reference=ctx.reference,
                                                           edges={e: 1.0}).logits)
                for e in graph.at("qkv").edges}


def entry_model_and_task(path: Path, n: int) -> tuple[Any, Any, str]:
    """The entry's TransformerLens model, `zoo eval`'s task data for it (seed 0) and its name."""
    from eval.patching.task import make_task
    from zoo.entry import load_entry_dir
    from zoo.targets import resolve_target

    target = resolve_target(load_entry_dir(path), "trained")
    task = make_task(case=target.case, encoding=target.encoding, reference=target.reference, n=n, seed=0)
    return target.model, task, target.name


def extrapolate(points: list[tuple[int, float]], edges: int) -> float | None:
    """Cost at `edges` on the line through the last two (edges, seconds) points in log-log."""
    pts = [(e, s) for e, s in points if s > 0][-2:]
    if len(pts) < 2 or pts[0][0] == pts[1][0]:
        return None
    (e0, s0), (e1, s1) = pts
    slope = math.log(s1 / s0) / math.log(e1 / e0)
    return s1 * (edges / e1) ** slope


def measure(model: Any, task: Any, graph: Any, key: str, options: dict[str, str] | None = None) -> dict[str, Any]:
    from eval.methods.registry import REGISTRY
    from eval.methods.options import with_options
    from eval.methods.interface import call_method

    counter = Counter()
    handle = counter.attach(model)
    start, cpu = time.perf_counter(), time.process_time()
    if key == "edge_patching_loop":
        edge_patching_loop(model, task, graph)
        kind = "scores"
    else:
        method = with_options(REGISTRY[key], options) if options else REGISTRY[key]
        kind = call_method(method, model, task, graph=graph, seed=0, ablation="resample").kind
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    handle.remove()
    return {"method": key, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "forward": counter.forward,
            "backward": counter.backward, "kind": kind}


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Log-log wall time against q/k/v edge count, one line per method (hollow markers: extrapolated)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    ax.set_xscale("log")
    ax.set_yscale("log")
    methods = list(dict.fromkeys(r["method"] for res in results for r in res["rows"]))
    for i, key in enumerate(methods):
        pts = [(res["qkv_edges"], r.get("cpu_s", r.get("extrapolated_s")), "cpu_s" in r)
               for res in results for r in res["rows"] if r["method"] == key]
        pts = [p for p in pts if p[1] and p[1] > 2e-3]  # `random` costs nothing measurable
        if not pts:
            continue
        color = f"C{i % 10}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, label=key,
                linestyle="--" if i >= 10 else "-")
        for e, sec, measured in pts:
            ax.plot([e], [sec], "o", color=color, fillstyle="full" if measured else "none")
    ax.axhline(600, color="k", linewidth=0.8, linestyle=":")
    ax.text(0.01, 600, " 10 min", transform=ax.get_yaxis_transform(), va="bottom", fontsize=8)
    ax.set_xlabel("q/k/v edges (random models 2x2, 4x4, 6x4, 8x8, 12x12)")
    ax.set_ylabel("CPU time, s (1 torch thread; hollow: extrapolated)")
    ax.set_title("Cost of each built-in method against edge count")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["2x2", "4x4", "6x4", "8x8", "12x12"], help="LAYERSxHEADS")
    parser.add_argument("--n", type=int, default=32, help="clean inputs (and counterfactuals)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--no-loop", action="store_true", help="skip the one-forward-per-edge baseline")
    parser.add_argument("--loop-sizes", nargs="+", default=["2x2", "4x4", "6x4"],
                        help="sizes the loop baseline runs at (it is one full forward per edge)")
    parser.add_argument("--budget-s", type=float, default=None, help="skip runs extrapolated beyond this")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--method-option", action="append", default=[], metavar="METHOD.FIELD=VALUE",
                        help="as zoo eval's, e.g. acdc.taus=0.01,0.001,0.1 (recorded in the JSON)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too (after every method)")
    parser.add_argument("--plot", type=Path, default=None, help="log-log PNG of cost against edge count")
    parser.add_argument("--from", dest="source", type=Path, default=None, help="plot this JSON, run nothing")
    parser.add_argument("--entry", type=Path, default=None, help="measure this entry folder instead of random models")
    parser.add_argument("--allocator", choices=ALLOCATORS, default="zoo", help=ALLOCATOR_HELP)
    args = parser.parse_args()

    if args.source is not None:
        plot(json.loads(args.source.read_text())["results"], args.plot or args.source.with_suffix(".png"))
        return
    import torch

    torch.set_num_threads(args.threads)
    from eval.core.graph import graph_of
    from eval.methods.options import parse_method_options

    options = parse_method_options(args.method_option, running=args.methods)
    allocator = use_allocator(args.allocator)

    results: list[dict[str, Any]] = []
    history: dict[str, list[tuple[int, float]]] = {}
    report = {"torch_threads": args.threads, "n": args.n, "allocator": allocator, "method_options": options,
              "results": results}
    for size in ([str(args.entry)] if args.entry else args.sizes):
        if args.entry:
            model, task, size = entry_model_and_task(args.entry, args.n)
            layers, heads, d_model = model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_model
        else:
            layers, heads = (int(x) for x in size.split("x"))
            model, d_model = random_model(layers, heads), 8 * heads
            task = random_task(model, args.n)
        graph = graph_of(model)
        edges = len(graph.at("qkv").edges)
        rows: list[dict[str, Any]] = []
        results.append({"model": size, "n_layers": layers, "n_heads": heads, "d_model": d_model,
                        "qkv_edges": edges, "n": args.n, "rows": rows})
        keys = list(args.methods)
        if not args.no_loop and "edge_patching" in keys and (args.entry or size in args.loop_sizes):
            keys.append("edge_patching_loop")
        for key in keys:
            guess = extrapolate(history.get(key, []), edges)
            if args.budget_s is not None and guess is not None and guess > args.budget_s:
                rows.append({"method": key, "extrapolated_s": round(guess, 1)})
                print(f"{size} {key}: skipped, extrapolated {guess:.0f} s", file=sys.stderr, flush=True)
            else:
                row = measure(model, task, graph, key, options.get(key))
                rows.append(row)
                history.setdefault(key, []).append((edges, row["cpu_s"]))
                print(f"{size} {key}: {row['wall_s']:.2f} s wall, {row['cpu_s']:.2f} s cpu, "
                      f"{row['forward']} fwd / {row['backward']} bwd",
                      file=sys.stderr, flush=True)
            if key == "edge_patching_loop" and "wall_s" in rows[-1]:
                batched = next((r for r in rows if r["method"] == "edge_patching" and "wall_s" in r), None)
                if batched:
                    rows[-1]["speedup"] = round(rows[-1]["wall_s"] / batched["wall_s"], 2)
                    rows[-1]["speedup_cpu"] = round(rows[-1]["cpu_s"] / batched["cpu_s"], 2)
            if args.out:
                args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
