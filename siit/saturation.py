"""A high-level model's saturated heads (planted.failure_modes' saturation) -> the attention-margin
loss that trains them saturated, and the measurement validation reports.

AtP* (Kramar et al. 2024, section 3.1): attribution patching underestimates a query or key edge when
the head's softmax is saturated, because the softmax's gradient vanishes where patching moves the
pattern from one key to another. SIIT alone trains a head that finds the right key, not a sharp one
(the first saturation entries scored q/k edges by EAP at -8 and -10 beside exact patching's +3). A
head is saturated here when, at every query, the scores of the keys it must attend to exceed every
other visible key's by MARGIN: each other key then holds at most e^-MARGIN of the mass per target
key, and the softmax's gradient is as small. The loss is a hinge on that gap, so it stops once the gap
is reached (an entropy penalty would push the scores towards infinity with a vanishing gradient).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from siit.correspondence import Correspondence
from siit.distractors import Distractor
from siit.transformer import Transformer

MARGIN = 8.0
"""Default score gap between the keys a saturated head attends to and every other visible key (e^-8:
3e-4); a high-level model may set its own (planted.causal_model.CausalModel.saturation_margin)."""
SATURATED = 0.99
"""Fraction of a head's real queries at the margin that training's criterion needs
(siit.train_checks): an entry of the family is saturated, not only correct."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Saturation:
    """The saturated heads of a task and the keys they attend to on the training set."""

    heads: tuple[str, ...]
    """Low-level names of the saturated heads (the correspondence's images)."""
    slots: tuple[tuple[int, int], ...]
    """(layer, head) of each, in `heads` order."""
    keys: torch.Tensor
    """bool [n_heads, N, query pos, key pos]: the keys each head attends to, per input it was built on
    (training's: the training set; validation's: the validation set)."""
    margin: float = MARGIN
    """The score gap the heads are trained to and judged by (the high-level model's saturation_margin)."""
    busy: int = 0
    """How many of the heads, the last ones, are busy heads (with_busy_heads): their margin loss is a
    term of its own, so the circuit's heads weigh in theirs as without them."""

    @staticmethod
    def build(high: Any, corr: Correspondence, tokens: torch.Tensor, mask: torch.Tensor) -> Saturation | None:
        """On these inputs, from a high-level model with saturated heads (planted.causal_model.
        CausalModel.saturated), or None for any other (compiled cases, models without one). The keys are
        computed on the CPU, where the high-level model lives, and put where `tokens` are."""
        names = getattr(high, "saturated", ())
        if not names:
            return None
        heads = tuple(corr.mapping[n][0] for n in names)
        keys = high.attention_keys(tokens.cpu(), mask.cpu()).to(tokens.device)
        return Saturation(heads=heads, slots=tuple(corr.low.slot(h) for h in heads), keys=keys,
                          margin=float(getattr(high, "saturation_margin", MARGIN)))


def one_position_keys(d: Distractor, n_ctx: int) -> torch.Tensor:
    """bool [n_ctx query, n_ctx key]: the keys a one-position head attends to, as a circuit head that
    fires at one position does (planted.large_circuit): at `at` its source (x_{at-offset}, or every input
    token up to `at` for a running mean, every input token for a whole-input mean), BOS at every other
    query. Trained with the circuit's attention margin (with_busy_heads): without it a
    head whose source was one key of ten or more never found it (R² 0 from step 100 to 650 on 9 of 38
    such heads, their source's attention mass 0.0-0.13; docs/results.md)."""
    keys = torch.zeros(n_ctx, n_ctx, dtype=torch.bool)
    keys[:, 0] = True
    if d.at is not None and d.at < n_ctx:
        keys[d.at, 0] = False
        if d.kind == "previous_token":
            keys[d.at, max(d.at - d.offset, 1)] = True
        else:
            keys[d.at, 1:(d.at + 1 if d.kind == "running_mean" else n_ctx)] = True
    return keys


def with_busy_heads(saturation: Saturation | None, slots: list[tuple[int, int]], heads: list[str],
                    patterns: torch.Tensor, n_rows: int, margin: float = MARGIN) -> Saturation | None:
    """`saturation` (the circuit's, or None) with busy heads added, each attending to the keys
    patterns [n, query pos, key pos] says on every one of n_rows inputs (one_position_keys), or
    [n, n_rows, query pos, key pos] per input, at the circuit's margin (`margin` when there is no circuit's).
    Training's only (siit.train_setup.Setup.saturation): checks, the criterion and validation's report
    rebuild the circuit's own from the high-level model."""
    if not heads:
        return saturation
    busy = patterns.to(torch.bool)
    busy = busy[:, None].expand(-1, n_rows, -1, -1) if busy.dim() == 3 else busy
    if saturation is None:
        return Saturation(heads=tuple(heads), slots=tuple(slots), keys=busy.contiguous(), busy=len(heads),
                          margin=margin)
    return dataclasses.replace(saturation, heads=saturation.heads + tuple(heads), slots=saturation.slots + tuple(slots),
                               keys=torch.cat([saturation.keys, busy.to(saturation.keys.device)]),
                               busy=saturation.busy + len(heads))


def training_margin_loss(saturation: Saturation, scores: torch.Tensor, keys: torch.Tensor,
                         query_mask: torch.Tensor) -> torch.Tensor:
    """margin_loss of the circuit's heads plus, as a term of its own, the busy heads' (Saturation.busy);
    scores and keys [n_heads, B, T, T] in `saturation.heads` order."""
    if not saturation.busy:
        return margin_loss(scores, keys, query_mask, saturation.margin)
    c = len(saturation.heads) - saturation.busy
    busy = margin_loss(scores[c:], keys[c:], query_mask, saturation.margin)
    return busy if c == 0 else margin_loss(scores[:c], keys[:c], query_mask, saturation.margin) + busy


def head_scores(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, acts: torch.Tensor,
                slots: tuple[tuple[int, int], ...], present: torch.Tensor | None = None) -> torch.Tensor:
    """[n_heads, B, query pos, key pos]: the scores of the heads at `slots` in the run with node
    activations `acts` (-inf at keys a query cannot see)."""
    scores = model.attention_scores(tokens, mask, acts, present)  # [L, B, H, T, T]
    return torch.stack([scores[layer, :, head] for layer, head in slots])


def gaps(scores: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(float [n, B, T] the lowest target key's score minus the highest other visible key's, bool
    [n, B, T] the queries where both exist) from scores [n, B, T, T] (-inf: hidden) and keys."""
    visible = torch.isfinite(scores)
    target = keys & visible
    low = scores.masked_fill(~target, float("inf")).amin(-1)
    high = scores.masked_fill(target | ~visible, float("-inf")).amax(-1)
    counted = target.any(-1) & (visible & ~target).any(-1)
    return torch.where(counted, low - high.clamp(min=-1e9), torch.zeros_like(low)), counted


def margin_loss(scores: torch.Tensor, keys: torch.Tensor, query_mask: torch.Tensor,
                margin: float = MARGIN) -> torch.Tensor:
    """Mean hinge max(0, margin - gap) over the counted queries of rows' real positions;
    query_mask bool [B, T] (the positions whose query counts)."""
    gap, counted = gaps(scores, keys)
    counted = counted & query_mask[None]
    if not bool(counted.any()):
        return scores.new_zeros(())
    return torch.relu(margin - gap[counted]).mean()


def saturated_fraction(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, acts: torch.Tensor,
                       saturation: Saturation, present: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """On the inputs `saturation` was built on: float [n_heads] the fraction of each head's real
    queries whose gap reaches its margin, then the gaps [n_heads, B, T], the counted queries bool
    [n_heads, B, T] and the scores [n_heads, B, T, T]."""
    with torch.no_grad():
        scores = head_scores(model, tokens, mask, acts, saturation.slots, present)
        gap, counted = gaps(scores, saturation.keys)
        counted = counted & (mask.bool() if present is None else mask.bool() & present)[None]
        hit = ((gap >= saturation.margin) & counted).sum((1, 2)) / counted.sum((1, 2)).clamp(min=1)
    return hit, gap, counted, scores


def saturation_report(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, acts: torch.Tensor,
                      saturation: Saturation, present: torch.Tensor | None = None) -> list[dict[str, Any]]:
    """Per saturated head on these inputs (`saturation.keys` built on them): the gap's minimum and
    median over real queries, the fraction at or above its margin, and the largest softmax mass outside
    the head's keys."""
    hit, gap, counted, scores = saturated_fraction(model, tokens, mask, acts, saturation, present)
    with torch.no_grad():
        keys = saturation.keys & torch.isfinite(scores)
        outside = torch.nan_to_num(torch.softmax(scores, -1), nan=0.0).masked_fill(keys, 0.0).sum(-1)
    rows = []
    for i, head in enumerate(saturation.heads):
        g = gap[i][counted[i]]
        rows.append({"head": head, "margin": saturation.margin, "queries": int(g.numel()),
                     "min_gap": round(float(g.min()), 3), "median_gap": round(float(g.median()), 3),
                     "saturated": round(float(hit[i]), 4), "criterion": SATURATED,
                     "max_mass_outside": float(outside[i][counted[i]].max())})
    return rows
