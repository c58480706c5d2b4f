"""Single patched edges -> the model's predictions, each run starting at its reader's block.

One patched edge (u, r) changes one reader r: r reads x + (u's patched output - u's clean output) while
everything else reads x. So the blocks before r's are the clean run's, and in r's block only r is
computed again (Transformer.read_once; a logits edge only unembeds); the later blocks run in full. This
is what a whole run that patches the edge computes (tests/test_siit/test_edge_bounds.py), at a fraction
of the cost when the model is wide: siit.edge_bounds' validation bound and Evaluator.edge_siia's check
of a wide model's edges (a 2-layer, 49-head model has about 7,800 of them) both read it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from siit.interventions import repeat_rows, rows_per_pass
from siit.losses import predictions
from siit.transformer import Transformer


def sender_outputs(embedding: torch.Tensor, acts: torch.Tensor, senders: torch.Tensor | None = None) -> torch.Tensor:
    """[U, N, T, d]: what each sender writes, in siit.edges.EdgeLayout's sender order (the input, then
    each block's heads and MLP), or only the rows `senders` (long). embedding [N, T, d]; acts
    [L, N, T, H + 1, d]."""
    if senders is None:
        return torch.cat([embedding[None], acts.permute(0, 3, 1, 2, 4).flatten(0, 1)])
    H1 = acts.shape[3]
    return torch.stack([embedding if u == 0 else acts[(u - 1) // H1, :, :, (u - 1) % H1] for u in senders.tolist()])


def edge_predictions(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, present: torch.Tensor | None,
                     acts: torch.Tensor, diffs: torch.Tensor, edges: torch.Tensor, task_kind: str,
                     sum_heads: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(rows, predictions [K, len(rows), N, T]) for chunks of `edges` (long [E, 2], EdgeLayout indices;
    rows index into it): edge (u, r) patched alone, reader r reading sender u's clean output plus
    diffs[k, u] ([K, U, N, T, d]: K ways of patching every sender, e.g. resample and mean ablation).
    tokens, mask, present: the clean inputs [N, T]; acts: their clean node activations; sum_heads: the
    later blocks sum their heads from z (Evaluator.sum_heads: a wide model's)."""
    n, L, H, K = tokens.shape[0], model.n_layers, model.n_heads, diffs.shape[0]
    per_block = 3 * H + 1
    with torch.no_grad():
        resid = model.residuals(tokens, mask, acts)  # [L + 1, N, T, d_model]
        allowed = model.allowed_keys(mask, present)
        written = acts[:, :, :, :H].sum(dim=3)  # [L, N, T, d]: each block's heads, summed (before: per edge)
    per_chunk = max(1, rows_per_pass(model, tokens.shape[1]) // (n * K))
    with torch.no_grad():
        for reader in edges[:, 1].unique().tolist():
            index = (edges[:, 1] == reader).nonzero().flatten()
            layer, slot = divmod(reader, per_block)
            for start in range(0, index.shape[0], per_chunk):
                rows = index[start : start + per_chunk]
                g = rows.shape[0] * K
                delta = diffs[:, edges[rows, 0].to(diffs.device)].flatten(0, 2)  # [K * rows * N, T, d]
                if layer == L:  # the logits read the final residual stream
                    logits = (repeat_rows(resid[L], g) + delta) @ model.unembed.W_U + model.unembed.b_U
                else:
                    head = None if slot >= 3 * H else repeat_rows(acts[layer, :, :, slot % H], g)
                    x = model.read_once(layer, slot, repeat_rows(resid[layer], g), repeat_rows(written[layer], g), head,
                                        delta, None if allowed is None else repeat_rows(allowed, g))
                    logits = model(repeat_rows(tokens, g), repeat_rows(mask, g),
                                   present=None if present is None else repeat_rows(present, g),
                                   start=(layer + 1, x), sum_heads=sum_heads)[0]
                yield rows, predictions(logits, task_kind).reshape(K, rows.shape[0], n, -1)
