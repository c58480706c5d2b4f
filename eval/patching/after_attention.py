"""A base pass's block state + sets of components to ablate on top of it -> the sets' logits, each pass
beginning after its earliest block's attention instead of at that block.

Why: greedy reduction (CAUSAL-BENCH's causal optimality, run for every method's identified set), the
ablation scan, greedy search and activation patching ablate set after set on top of a base pass, and
eval.patching.ablation.node_metrics began each set's pass at its earliest component's block. Nothing a
set ablates at block l or later changes what block l's heads read, so their outputs there are the base
pass's: block l's attention output is the base's plus, for each head of block l the set ablates, its
reference minus its base output. Only block l's MLP and the blocks after it depend on the set. On
planted large-circuit (one block of 99 heads and an MLP) a removal is then an MLP and an unembedding:
the attention of 99 heads over short rows, most of each pass, is computed once per base instead of
once per set.

Only where eval.patching.bare writes a model's MLP out (TransformerLens 3.x without LayerNorm, and siit's
Transformer: `bare` not None); a bridge keeps the block-start passes. The block state is read through hooks (the base
pass's head outputs as their readers saw them, and each MLP's input), so nothing else of the block is
computed twice; the logits are the block-start passes' up to float rounding (tests/test_eval/
test_patching_passes.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

import torch

from eval.core.circuit import head_node, mlp_node, parse_node
from eval.patching.bare import BareModel
from eval.patching.hook_plan import Start


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockState:
    """One pass's state inside every block: what a set ablated from block l on leaves as it was."""

    mlp_inputs: tuple[torch.Tensor, ...]
    """Per layer, the MLP's input [n, pos, d_model] (the residual after the block's attention)."""
    heads: Mapping[str, torch.Tensor]
    """Head -> its output [n, pos, d_model] as its readers saw it (its reference where the base
    ablates it)."""
    mlps: Mapping[str, torch.Tensor]
    """MLP -> its output [n, pos, d_model] as its readers saw it."""


def block_state(adapter, tokens: torch.Tensor, mask: torch.Tensor | None, reference: Mapping[str, torch.Tensor],
                base: Collection[str]) -> BlockState:
    """The state of the pass that ablates `base` (one hooked pass, no gradient)."""
    L, H = adapter.n_layers, adapter.n_heads
    heads = [head_node(l, h) for l in range(L) for h in range(H)]
    mlps = [mlp_node(l) for l in range(L)]
    with torch.no_grad():
        run = adapter.run(tokens, mask, reference=reference, nodes={b: 1.0 for b in base},
                          read_outputs=[*heads, *mlps], read_inputs=mlps)
    return BlockState(mlp_inputs=tuple(run.inputs[m] for m in mlps), heads={h: run.outputs[h] for h in heads},
                      mlps={m: run.outputs[m] for m in mlps})


def logits_after_attention(adapter, bm: BareModel, state: BlockState, layer: int, sets: Sequence[Collection[str]],
                           base: Collection[str], reference: Mapping[str, torch.Tensor], tokens: torch.Tensor,
                           mask: torch.Tensor | None) -> torch.Tensor:
    """Logits [k·n, pos, d_vocab_out] of k row blocks, block j ablating sets[j] and `base` (every
    component at block `layer` or later), computed from block `layer`'s MLP on."""
    k, H = len(sets), bm.n_heads
    x = state.mlp_inputs[layer]  # [n, pos, d]
    n = x.shape[0]
    mid = x.unsqueeze(0).repeat(k, 1, 1, 1)  # [k, n, pos, d]
    for h in range(H):  # each head of this block a set ablates: its reference minus its base output
        name = head_node(layer, h)
        rows = _rows(sets, name, x.device)
        if rows is not None:
            mid += rows[:, None, None, None] * (reference[name] - state.heads[name])[None]
    m = mlp_node(layer)
    if m in base:
        out = state.mlps[m].expand(k, *x.shape)  # the base's reference, the same in every block
    else:
        flat = mid.reshape(-1, x.shape[-1])
        out = torch.addmm(bm.b_out[layer], bm.act(torch.addmm(bm.b_in[layer], flat, bm.W_in[layer])),
                          bm.W_out[layer]).view(mid.shape)
        rows = _rows(sets, m, x.device)
        if rows is not None:  # the sets that ablate the MLP read its reference
            out = torch.where(rows[:, None, None, None].bool(), reference[m].expand_as(x)[None], out)
    resid = (mid + out).reshape(k * n, *x.shape[1:])
    if layer + 1 == bm.n_layers:
        return bm.unembed(resid)
    later = {c for s in [*sets, base] for c in s if parse_node(c).layer > layer}
    weights = {c: torch.tensor([float(c in s or c in base) for s in sets], device=resid.device).repeat_interleave(n)
               for c in sorted(later)}
    return adapter.run(tokens.repeat(k, 1), None if mask is None else mask.repeat(k, 1),
                       reference={c: reference[c].repeat(k, 1, 1) for c in later}, nodes=weights,
                       start=Start(layer=layer + 1, resid=resid, outputs={})).logits


def _rows(sets: Sequence[Collection[str]], node: str, device: torch.device) -> torch.Tensor | None:
    """float [k]: 1 where the set ablates `node`; None where none does."""
    hit = [float(node in s) for s in sets]
    return torch.tensor(hit, device=device) if any(hit) else None

