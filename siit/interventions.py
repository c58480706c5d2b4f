"""Interchange interventions on both models, batched: run the source once, cache its node
activations, patch them into the base run. Every row of a batch may intervene on its own node set
(a bool mask per row), so one forward pass serves many nodes at once.

`INTINV(M, b, s, V)` of the paper is `interchange(M, b, node_activations(M, s), mask(V))`.
Activations are patched at every position; how sources of another length are paired with bases
is decided by the data (siit.data.pair_sources).
"""

from __future__ import annotations

from typing import Literal

import torch

from siit.transformer import Patch, Transformer

Ablation = Literal["resample", "mean", "zero"]


def node_activations(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor,
                     present: torch.Tensor | None = None) -> torch.Tensor:
    """[n_layers, B, T, n_heads + 1, d_model] node activations, without gradients (a source run)."""
    with torch.no_grad():
        return model(tokens, mask, return_acts=True, present=present)[1]


def interchange(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor,
                source_acts: torch.Tensor, node_mask: torch.Tensor, present: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of the base run with the masked nodes set to `source_acts`.

    node_mask: bool [B, n_layers, n_heads + 1] (or [n_layers, n_heads + 1] for every row);
    source_acts: [n_layers, B or 1, T, n_heads + 1, d_model]; present: see Transformer.forward.
    """
    if node_mask.dim() == 2:
        node_mask = node_mask.expand(tokens.shape[0], *node_mask.shape)
    return model(tokens, mask, Patch(mask=node_mask, values=source_acts), present=present)[0]


def ablation_values(acts: torch.Tensor, mask: torch.Tensor, kind: Ablation) -> torch.Tensor:
    """Replacement activations [n_layers, 1, T, slots, d] for mean or zero ablation.

    The mean is taken per position over the sequences in which that position is a real token
    (BOS or input); positions that are never real get zeros.
    """
    if kind == "zero":
        return torch.zeros_like(acts[:, :1])
    if kind != "mean":
        raise ValueError(f"no fixed replacement for {kind!r} ablation")
    weight = mask.to(acts.dtype)[None, :, :, None, None]
    count = weight.sum(dim=1, keepdim=True).clamp(min=1.0)
    return (acts * weight).sum(dim=1, keepdim=True) / count


def repeat_rows(x: torch.Tensor, times: int, dim: int = 0) -> torch.Tensor:
    """x repeated `times` along dim (row r of copy k is row r of x): stacks intervention groups."""
    reps = [1] * x.dim()
    reps[dim] = times
    return x.repeat(*reps)


MAX_ROWS = 8192  # rows per batched forward pass: bounds memory for larger models
MAX_ELEMENTS = 1 << 26
"""Per-node activations one pass may hold ([rows, pos, H + 1, d_model]): a model wider than every entry
before planted large-circuit (99 heads, d_model 198: 8192 rows would be 7.8 GB a tensor) passes fewer rows."""


def rows_per_pass(model: Transformer, n_ctx: int) -> int:
    """Rows of one batched forward pass: MAX_ROWS, fewer where a row's per-node activations are so wide
    that MAX_ROWS of them would pass MAX_ELEMENTS (causal-bench-12x12 still takes 8192)."""
    per_row = n_ctx * (model.n_heads + 1) * model.d_model
    return max(1, min(MAX_ROWS, MAX_ELEMENTS // per_row))


MAX_SAMPLE_ELEMENTS = 1 << 27
"""Node activations one chunk of rows may hold ([L, rows, pos, H + 1, d_model]; 512 MiB of float32): the
validation bounds' sample (siit.bound_chunks) and a lean evaluator's edge check (Evaluator.edge_siia) run in
such chunks. Every entry's sample before planted large-circuit fits it whole (the widest, causal-bench-12x12's
1,200 sequences, holds 2^25.9); large-circuit's 3,300 (2^29.8) run in chunks of 484 rows."""


def chunk_rows(model: Transformer, n_ctx: int) -> int:
    """Rows of one chunk: as many as MAX_SAMPLE_ELEMENTS of node activations hold (at least one)."""
    per_row = model.n_layers * n_ctx * (model.n_heads + 1) * model.d_model
    return max(1, MAX_SAMPLE_ELEMENTS // per_row)


def row_slices(n: int, per: int) -> list[slice]:
    """The rows 0..n-1 as consecutive slices of `per` rows (the last one shorter): the chunks of chunk_rows."""
    return [slice(start, min(n, start + per)) for start in range(0, n, per)]
