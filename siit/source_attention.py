"""Busy heads that copy one token -> a floor on the attention they give it (a training loss).

A previous_token distractor (siit.distractors) asks a busy head to write the feature of the token
`offset` positions back. Its squared error reaches the head's scores only through the softmax, whose
gradient vanishes where the pattern is saturated on a wrong key, and a head can settle there: case 33
at seed 4 put a1.h0 on BOS whenever one of two (token, position) keys was its source, and its R²
stayed at 0.88 from step 275 to step 8000 (docs/results.md). The log of the source's attention mass
has a gradient that does not vanish as the mass goes to 0, so a hinge on it, log FLOOR - log p, pulls
such a head out and stops once the source has FLOOR of the mass.

A floor, not a margin over every other key (siit.saturation's hinge): a head meets a target whose
variance differs by position (siit.position_profiles) by sharing its attention between the source
and BOS, query position by query position; a sharp head cannot (with the margin case 33 seed 4 held
a0.h3 at R² 0.80 from step 200 on).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from siit.distractors import DistractorTargets

FLOOR = 0.05
"""Least attention mass a previous-token busy head gives its source key (the loss is 0 above it).
Low enough that the BOS share a position profile needs stays free (profiles vary a target's
standard deviation about 4x over positions: a source mass of 0.25 to 1)."""


@dataclasses.dataclass(frozen=True)
class SourceAttention:
    """The previous-token busy heads of a model and the key each query position copies from."""

    heads: tuple[str, ...]
    """Low-level names (a{l}.h{h})."""
    slots: tuple[tuple[int, int], ...]
    """(layer, head) of each, in `heads` order."""
    keys: torch.Tensor
    """long [n_heads, n_ctx]: at query t, the source key max(t - offset, 1) (siit.distractors.raw_targets'),
    clamped to the context."""

    def __post_init__(self) -> None:
        if self.keys.shape[0] != len(self.heads) or len(self.slots) != len(self.heads):
            raise ValueError(f"{len(self.heads)} heads, {len(self.slots)} slots, keys {tuple(self.keys.shape)}")

    @staticmethod
    def build(targets: DistractorTargets | None, n_ctx: int) -> SourceAttention | None:
        """From the distractors of a training run, or None when no busy head copies one token at every
        position (a one-position head is trained by siit.saturation's margin instead)."""
        if targets is None:
            return None
        picked = [(i, d) for i, d in enumerate(targets.distractors) if d.kind == "previous_token" and d.at is None]
        if not picked:
            return None
        query = torch.arange(n_ctx)
        keys = torch.stack([(query - d.offset).clamp(min=1, max=n_ctx - 1) for _, d in picked])
        return SourceAttention(heads=tuple(d.node for _, d in picked),
                               slots=tuple(tuple(targets.slots[i].tolist()) for i, _ in picked),
                               keys=keys.to(targets.slots.device))


def floor_loss(scores: torch.Tensor, keys: torch.Tensor, query_mask: torch.Tensor, floor: float = FLOOR) -> torch.Tensor:
    """Mean over counted queries of max(0, log floor - log p(source)); scores [n, B, T, T] (-inf: a key
    the query cannot see), keys long [n, >= T] (SourceAttention.keys), query_mask bool [B, T]. A query is
    counted where its source is visible and it sees another key (a causal BOS query sees only itself)."""
    n, B, T, _ = scores.shape
    visible = torch.isfinite(scores)
    # hidden keys at a large finite score below: a query that sees none gives no NaN to the backward pass
    logp = torch.log_softmax(torch.where(visible, scores, torch.full_like(scores, -1e9)), dim=-1)
    index = keys[:, None, :T, None].expand(n, B, T, 1)
    source = logp.gather(-1, index)[..., 0]  # [n, B, T]
    counted = visible.gather(-1, index)[..., 0] & (visible.sum(-1) > 1) & query_mask[None]
    if not bool(counted.any()):
        return scores.new_zeros(())
    return torch.relu(math.log(floor) - source[counted]).mean()
