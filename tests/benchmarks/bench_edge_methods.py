"""Wall time and forward / backward passes of every edge-level method on random models, as JSON.

    python tests/benchmarks/bench_edge_methods.py [--sizes 6x4 8x8] [--n 32] [--methods ...]

Models are random (no LayerNorm, GELU, d_head 8, d_model = 8·heads, d_mlp = 4·d_model, 10
positions); labels are the model's own argmax on clean and resampled inputs. 6x4 has MIB's 1108
q/k/v edges. Passes are counted with a forward hook on the unembedding (one per forward pass, whatever
its rows) and a gradient hook on its logits (one per backward pass). `edge_patching_loop` is exact
edge patching with one forward pass per edge (n rows each), the naive loop the batched version
replaces; `speedup` is its wall time over the batched one. One torch thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any


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

    from eval.tlens import build_hooked, hooked_config
    from siit.transformer import Transformer, init_weights

    d_model = 8 * heads
    config = hooked_config(n_layers=layers, d_model=d_model, n_heads=heads, d_head=8, d_mlp=4 * d_model,
                           d_vocab=20, d_vocab_out=10, n_ctx=10, causal=True, act_fn="gelu")
    model = Transformer(config)
    init_weights(model, torch.Generator().manual_seed(seed))
    return build_hooked(config, {k: v.clone() for k, v in model.state_dict().items()})


def random_task(model: Any, n: int, seed: int = 0) -> Any:
    import torch

    from eval.task import TaskData

    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 20, (2, n, 10), generator=gen)
    mask = torch.ones(n, 10, dtype=torch.long)
    with torch.no_grad():
        labels = [model(tokens[i], attention_mask=mask).argmax(-1) for i in range(2)]
    positions = mask.bool().clone()
    positions[:, 0] = False
    return TaskData(tokens=tokens[0], mask=mask, cf_tokens=tokens[1], cf_mask=mask.clone(), labels=labels[0],
                    cf_labels=labels[1], positions=positions, task_kind="classification", seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["6x4", "8x8"], help="LAYERSxHEADS per model")
    parser.add_argument("--n", type=int, default=32, help="clean inputs (and counterfactuals)")
    parser.add_argument("--methods", nargs="+", default=["edge_patching", "eap", "eap_ig_inputs",
                                                          "eap_ig_activations", "acdc", "node_sp", "edge_sp",
                                                          "ifr", "ensemble"])
    parser.add_argument("--no-loop", action="store_true", help="skip the one-forward-per-edge baseline")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from eval.ablation import make_context
    from eval.baselines import REGISTRY
    from eval.edge_patching import edge_effects
    from eval.graph import graph_of
    from eval.methods import call_method

    results = []
    for size in args.sizes:
        layers, heads = (int(x) for x in size.split("x"))
        model = random_model(layers, heads)
        task = random_task(model, args.n)
        graph = graph_of(model)
        edges = len(graph.at("qkv").edges)
        rows = []
        for key in args.methods:
            counter = Counter()
            handle = counter.attach(model)
            start = time.perf_counter()
            out = call_method(REGISTRY[key], model, task, graph=graph, seed=0, ablation="resample")
            wall = time.perf_counter() - start
            handle.remove()
            rows.append({"method": key, "wall_s": round(wall, 3), "forward": counter.forward,
                         "backward": counter.backward, "kind": out.kind})
            print(f"{size} {key}: {wall:.1f} s", file=sys.stderr, flush=True)
        if not args.no_loop and "edge_patching" in args.methods:
            ctx = make_context(model, task, graph)
            counter = Counter()
            handle = counter.attach(model)
            start = time.perf_counter()
            edge_effects(ctx, graph.at("qkv").edges, max_rows=task.n)  # one edge per forward pass
            wall = time.perf_counter() - start
            handle.remove()
            batched = next(r for r in rows if r["method"] == "edge_patching")
            rows.append({"method": "edge_patching_loop", "wall_s": round(wall, 3), "forward": counter.forward,
                         "backward": counter.backward, "kind": "scores",
                         "speedup": round(wall / batched["wall_s"], 2)})
        results.append({"model": size, "n_layers": layers, "n_heads": heads, "d_model": 8 * heads,
                        "qkv_edges": edges, "n": args.n, "rows": rows})
    print(json.dumps({"torch_threads": 1, "results": results}, indent=1))


if __name__ == "__main__":
    main()
