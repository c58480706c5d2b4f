"""The auto-circuit side of bench_peers.py: run in auto-circuit's own venv, never the zoo's.

    /path/to/venv-autocircuit/bin/python tests/benchmarks/peer_autocircuit.py DIR

DIR holds what bench_peers.py wrote: model.safetensors + model.json (HookedTransformerConfig
fields), task.safetensors (clean, corrupt, answers, wrong_answers) and spec.json (methods, τ grid,
edge orders, time cap, torch threads). Results go to DIR/peer.json. Imports only auto-circuit,
TransformerLens, safetensors and torch: the comparison must not lean on any zoo code.

Edges are named as auto-circuit names them ("A0.1->A2.3.Q", "Resid Start->MLP 0", ...).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file


class Capped(Exception):
    """Raised from inside a forward pass when a run reaches its time cap."""


def load(folder: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The patchable model, a one-batch dataloader and the spec."""
    from auto_circuit.data import PromptDataLoader, PromptDataset
    from auto_circuit.utils.graph_utils import patchable_model
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    spec = json.loads((folder / "spec.json").read_text())
    model = HookedTransformer(HookedTransformerConfig(**json.loads((folder / "model.json").read_text())))
    missing, unexpected = model.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
    # Only TransformerLens' own buffers (causal masks, IGNORE) may be missing.
    assert not unexpected and all(k.endswith(("mask", "IGNORE")) for k in missing), (missing, unexpected)
    model.eval()
    task = load_file(folder / "task.safetensors")
    data = PromptDataset(task["clean"], task["corrupt"], list(task["answers"]), list(task["wrong_answers"]))
    loader = PromptDataLoader(data, seq_len=None, diverge_idx=0, batch_size=len(data), shuffle=False)
    # Positions 1.. are scored: the zoo's task scores every position but the first.
    pmodel = patchable_model(model, factorized=True, slice_output="not_first_seq", separate_qkv=True,
                             device=torch.device("cpu"))
    return pmodel, loader, spec


def by_name(model: Any) -> dict[str, Any]:
    return {e.name: e for e in model.edges}


def edge_patching(model: Any, loader: Any, order: list[str], cap_s: float) -> dict[str, Any]:
    """Exact m(clean) - m(one edge patched) for each edge, one forward pass per edge, each starting
    at the edge's destination block from the clean residual stream, as auto-circuit's own ACDC
    loop runs its passes (auto-circuit ships no exact per-edge patching algorithm). `order` must
    visit destinations from the last block down: every pass from block l overwrites the shared
    current source outputs of blocks >= l, and a pass from a later block reads the earlier ones."""
    from auto_circuit.utils.ablation_activations import src_ablations
    from auto_circuit.utils.graph_utils import patch_mode, set_all_masks
    from auto_circuit.utils.tensor_ops import batch_avg_answer_diff

    start = time.perf_counter()
    edges = by_name(model)
    batch = next(iter(loader))
    patch_outs, src_outs = src_ablations(model, batch.corrupt), src_ablations(model, batch.clean)
    with torch.inference_mode():
        clean = float(batch_avg_answer_diff(model(batch.clean)[model.out_slice], batch))
        _, toks, short, attn = model.input_to_embed(batch.clean)
        _, cache = model.run_with_cache(batch.clean)
        resids = [cache[f"blocks.{i}.hook_resid_pre"].clone() for i in range(model.cfg.n_layers)]
    scores: dict[str, float] = {}
    set_all_masks(model, val=0.0)
    with patch_mode(model, patch_outs, curr_src_outs=src_outs), torch.inference_mode():
        for name in order:
            if time.perf_counter() - start > cap_s:
                break
            edge = edges[name]
            edge.patch_mask(model).data[edge.patch_idx] = 1.0
            layer = int(edge.dest.module_name.split(".")[1])
            out = model(resids[layer], start_at_layer=layer, tokens=toks, shortformer_pos_embed=short,
                        attention_mask=attn)[model.out_slice]
            scores[name] = clean - float(batch_avg_answer_diff(out, batch))
            edge.patch_mask(model).data[edge.patch_idx] = 0.0
    return {"scores": scores, "clean_metric": clean, "done": len(scores), "total": len(order),
            "wall_s": time.perf_counter() - start}


def mask_gradient(model: Any, loader: Any, samples: int | None) -> dict[str, Any]:
    """auto-circuit's mask_gradient_prune_scores with the logit difference: EAP (samples None,
    mask 0) or its integrated-gradients variant over `samples` + 1 mask values."""
    from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores

    start = time.perf_counter()
    kwargs = {"mask_val": 0.0} if samples is None else {"integrated_grad_samples": samples}
    scores = mask_gradient_prune_scores(model, loader, None, grad_function="logit", answer_function="avg_diff",
                                        **kwargs)
    wall = time.perf_counter() - start
    out = {e.name: float(e.prune_score(scores)) for e in model.edges}
    model.zero_grad(set_to_none=True)
    return {"scores": out, "wall_s": wall}


def acdc(model: Any, loader: Any, taus: list[list[int]], order: list[str], cap_s: float) -> dict[str, Any]:
    """auto-circuit's acdc_prune_scores, one call per τ = base·10**exp (its own τ loop runs the
    same sweep per τ; one call each keeps every τ's removed set apart). model.edges is handed over
    in the zoo's visiting order: auto-circuit sorts edges by destination layer only, and within a
    layer a set's iteration order would decide. Past cap_s a forward pass raises Capped; the edges
    decided by then are the first `done` of the order (the undecided one's mask is not read)."""
    from auto_circuit.prune_algos.ACDC import acdc_prune_scores

    edges = by_name(model)
    saved_edges, saved_forward = model.edges, model.forward
    model.edges = [edges[name] for name in order]
    start = time.perf_counter()
    passes = [0]

    def forward(*args: Any, **kwargs: Any) -> Any:
        if "start_at_layer" in kwargs:  # one per edge tried; setup passes are not counted
            if time.perf_counter() - start > cap_s:
                raise Capped
            passes[0] += 1
        return saved_forward(*args, **kwargs)

    model.forward = forward
    runs = []
    try:
        for base, exp in taus:
            passes[0] = 0
            t0 = time.perf_counter()
            try:
                scores = acdc_prune_scores(model, loader, None, tao_exps=[exp], tao_bases=[base])
                removed = [e.name for e in model.edges if float(e.prune_score(scores)) != float("inf")]
                done = len(order)
            except Capped:
                done = passes[0]  # passes that returned; the edge in flight when the cap hit is undecided
                removed = [e.name for e in model.edges[:done] if float(e.patch_mask(model).data[e.patch_idx]) == 1.0]
            runs.append({"tau": base * 10**exp, "removed": removed, "done": done, "total": len(order),
                         "wall_s": time.perf_counter() - t0})
            if done < len(order):
                break  # capped: the remaining τ would not start either
    finally:
        model.edges, model.forward = saved_edges, saved_forward
    return {"runs": runs, "wall_s": time.perf_counter() - start}


def main() -> None:
    folder = Path(sys.argv[1])
    torch.set_num_threads(json.loads((folder / "spec.json").read_text())["threads"])
    model, loader, spec = load(folder)
    results: dict[str, Any] = {"versions": versions()}
    for method in spec["methods"]:
        if method == "edge_patching":
            results[method] = edge_patching(model, loader, spec["patch_order"], spec["cap_s"])
        elif method == "eap":
            results[method] = mask_gradient(model, loader, None)
        elif method == "eap_ig":
            results[method] = mask_gradient(model, loader, spec["ig_samples"])
        elif method == "acdc":
            results[method] = acdc(model, loader, spec["taus"], spec["acdc_order"], spec["cap_s"])
        elif method == "acdc_native":  # auto-circuit's own order within a layer (set iteration)
            native = sorted(model.edges, key=lambda e: e.dest.layer, reverse=True)
            results[method] = acdc(model, loader, spec["taus"], [e.name for e in native], spec["cap_s"])
        print(f"peer {method}: {results[method]['wall_s']:.2f} s", file=sys.stderr, flush=True)
        (folder / "peer.json").write_text(json.dumps(results))


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("auto-circuit", "transformer-lens", "torch", "numpy")}


if __name__ == "__main__":
    main()
