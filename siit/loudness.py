"""The circuit's loudness during training -> how loud each busy node's distractor target is.

Busy (out-of-circuit) nodes are scaled to the circuit: their target variance and mean output norm
are factors (siit.distractors) times a running measurement of the median circuit node. That
measurement must be the one eval.core.node_heuristics makes afterwards (padded inputs of the sampler's own
lengths), or every busy node lands louder or quieter than its factor says and the circuit's rank
among them drifts. Three things made it differ (on case 18 busy nodes measured 13-33% louder in
variance than their factors, which put its circuit's separation at 0.762):

- sources run long (source_not_shorter pairing): rows are weighted by length back to the
  training inputs' distribution (siit.data.source_length_weights);
- under bidirectional attention a circuit head reads PAD keys and is quieter on padded rows, so
  rows drawn padded and the other shapes each have their own reference;
- what a node writes beside its target direction, and its lag behind a moving target, make its
  measured loudness differ from its target's: a per-node gain (at most 1) trims the target until
  the node measures what its factor says.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from siit.distractors import DistractorTargets, loudness, mean_norms, norm_match_loss, variances

REFERENCE_VARIANCE_FLOOR = 0.25
"""Smallest reference variance of the distractors (the circuit starts near zero output)."""
REFERENCE_MOMENTUM = 0.9
"""Of the running references. 0.97 (less batch noise) kept case 11 from its criterion in 8000
steps; at 0.9 it meets it in 3300."""
CALIBRATION_RATE = 0.05
"""Step of a gain per training step, in log units of the node's measured / wanted ratio."""
GAIN_RANGE = (0.25, 1.0)
"""Bounds of the gains: calibration trims a target, it does not replace it. Never above 1: a busy
node quieter than its target is still learning it, and gains raised for that lag (to 1.2-1.4 by
the end of case 18's training) left nodes louder than their factors once they caught up."""

Groups = list[tuple[str, torch.Tensor]]
"""(reference buffer name, [B, T] float weight of each position) per input-shape class."""


def shape_groups(weight: torch.Tensor, padded: torch.Tensor | None) -> Groups:
    """The positions' weights [B, T] split by shape class (`padded`: bool [B] rows drawn padded;
    None when every row is padded)."""
    if padded is None:
        return [("reference", weight)]
    return [("reference", weight * padded[:, None]), ("reference_unpadded", weight * ~padded[:, None])]


def _measurable(rows: torch.Tensor) -> bool:
    return bool((rows > 0).any(dim=1).sum() >= 2)  # a variance across inputs needs two of them


class Loudness(nn.Module):
    """Running references and per-node gains (buffers, so a checkpoint holds them)."""

    def __init__(self, n_busy: int) -> None:
        super().__init__()
        self.register_buffer("reference", torch.zeros(2))
        """(output variance, mean output norm) of the median circuit node, a running average; on
        the rows drawn padded to n_ctx when input shapes vary (what eval.core.node_heuristics measures)."""
        self.register_buffer("reference_unpadded", torch.zeros(2))
        """The same on the rows drawn in the other shapes (only used when input shapes vary)."""
        self.register_buffer("gain", torch.ones(n_busy, 2))
        """Per busy node, the factor on its target's (variance, norm)."""

    @torch.no_grad()
    def track(self, measured: torch.Tensor, which: str = "reference", momentum: float = REFERENCE_MOMENTUM) -> None:
        """Update a reference; a floor on the variance keeps early targets from vanishing."""
        ref = getattr(self, which)
        measured = torch.stack([measured[0].clamp(min=REFERENCE_VARIANCE_FLOOR), measured[1]])
        fresh = bool((ref == 0).all())
        ref.copy_(measured if fresh else momentum * ref + (1 - momentum) * measured)

    @torch.no_grad()
    def calibrate(self, log_ratio: torch.Tensor, rate: float = CALIBRATION_RATE) -> None:
        """Move each gain against log(measured / wanted) [D, 2] of its node."""
        ratio = log_ratio.exp().clamp(min=1e-3, max=1e3)
        self.gain.copy_((self.gain * ratio.pow(-rate)).clamp(*GAIN_RANGE))

    @torch.no_grad()
    def update(self, busy: torch.Tensor, circuit: torch.Tensor, targets: DistractorTargets,
               groups: Groups) -> None:
        """One source run's busy and circuit nodes' outputs [D, B, T, d] and [C, B, T, d]
        (siit.distractors.node_outputs): each class's reference, then the gains from the busy
        nodes' measured / wanted (variance, norm), averaged over the classes by weight."""
        busy = busy.detach()
        logs, shares = [], []
        for which, rows in groups:
            if not _measurable(rows):
                continue
            self.track(loudness(circuit, rows), which)
            ref = getattr(self, which)
            measured = torch.stack([variances(busy, rows), mean_norms(busy, rows)], dim=1)  # [D, 2]
            wanted = torch.stack([targets.wanted_variances(ref), targets.wanted_norms(ref)], dim=1)
            logs.append((measured / wanted.clamp(min=1e-9)).clamp(min=1e-3, max=1e3).log())
            shares.append(float(rows.sum()))
        if logs:
            self.calibrate(sum(v * w for v, w in zip(logs, shares)) / sum(shares))

    def targets(self, targets: DistractorTargets, z: torch.Tensor, padded: torch.Tensor | None,
                first: torch.Tensor | None = None) -> torch.Tensor:
        """[D, B, T] distractor targets from the standardised ones z [D, B, T]
        (DistractorTargets.standardised), each row scaled to its shape class's reference; `first`
        [D] the first components' part of their nodes' variance (siit.busy_components), None: all."""
        if padded is None:
            return targets.scaled(z, self.reference[None], self.gain, first)[0]
        both = targets.scaled(z, torch.stack([self.reference, self.reference_unpadded]), self.gain, first)
        return torch.where(padded[None, :, None], both[0], both[1])

    def scales(self, targets: DistractorTargets, padded: torch.Tensor | None, rows: int,
               first: torch.Tensor | None = None) -> torch.Tensor:
        """[D, rows] each target's standard deviation on each of `rows` rows (`targets`'s scale: its
        shape class's reference, the node's gain and `first`); what siit.busy_components scales its
        further components by."""
        if padded is None:
            return targets.scales(self.reference[None], self.gain, first)[0][:, None].expand(-1, rows)
        both = targets.scales(torch.stack([self.reference, self.reference_unpadded]), self.gain, first)  # [2, D]
        return torch.where(padded[None, :], both[0][:, None], both[1][:, None])

    def norm_terms(self, busy: Callable[[], torch.Tensor], targets: DistractorTargets, groups: Groups,
                   weight: torch.Tensor) -> list[torch.Tensor]:
        """Busy nodes' mean output norms against their factors (norm_match_loss), one term per class
        against its own reference, weighted by its share of `weight` [B, T] (all positions);
        busy() gives their outputs [D, B, T, d] (siit.train_step reads them once or per term)."""
        total = weight.sum().clamp(min=1e-6)
        return [(1.0 if len(groups) == 1 else rows.sum() / total)
                * norm_match_loss(busy(), rows, targets.wanted_norms(getattr(self, which)))
                for which, rows in groups if (rows > 0).any()]
