"""A busy node's distractor -> a target of several scalars (issue 32: busy work that carries more than one).

A busy node that writes one scalar along one direction has an output covariance of rank one
(participation ratio 1.01-1.3 on the main entries, against 1.4-4 for circuit nodes), so ranking nodes
by the rank of what they write finds the circuit without an intervention. A real component writes
several features. Here a busy node's target gets up to `components - 1` further components: the same
kind of computation (the same source token, the same mean, the same MLP rule, at the same positions and
with the same per-position profile) on another token feature, each read along a probe direction of its
own, as a head that copies a token copies several of its features.

Loudness stays the node's: its target variance is split, the first component taking 1 / (1 + the
further components' shares) of it (DistractorTargets.scales) and each further one `share` x the
first's, zero-mean (standardised per position as the first is), so the node's variance is what its
factor says and the calibration (siit.loudness) compares the whole node with it as before; what the
further components add to the node's norm is trimmed by the node's norm gain, as anything else it
writes beside its first direction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from siit.distractors import Distractor, DistractorTargets, readout

MAX_COMPONENTS = 4
"""Most components a busy node's target has (TrainConfig.distractor_components)."""
MIN_SHARE = 0.1
"""A node whose ratio needs a further component of less than this share writes one scalar instead:
a component that small is noise beside the first, not a feature."""


def shares_for(ratio: float, k: int) -> tuple[float, ...]:
    """The k - 1 equal variance shares a (each component's variance / the first's, in [0, 1]) whose
    participation ratio (1 + (k - 1) a)² / (1 + (k - 1) a²) is `ratio` (1 <= ratio <= k): the
    effective number of directions eval.core.looks.output_rank counts. It rises from 1 at a = 0 to
    k at a = 1, so bisection finds a."""
    if k == 1:
        return ()
    lo, hi = 0.0, 1.0
    for _ in range(50):
        a = (lo + hi) / 2
        lo, hi = (a, hi) if (1 + (k - 1) * a) ** 2 / (1 + (k - 1) * a * a) < ratio else (lo, a)
    return ((lo + hi) / 2,) * (k - 1)


def draw_components(distractors: Sequence[Distractor], components: int, token_weight: np.ndarray, seed: int,
                    d_head: int) -> tuple[Distractor, ...]:
    """Each distractor with further components so that its target's participation ratio (how many
    directions the node writes) is drawn stratified over [1, components] (log-even, shuffled: every
    model spans the range, as loudness factors do; a head's at most its width d_head). A ratio r takes
    ceil(r) components of equal shares (shares_for; one if that share would be under MIN_SHARE, whose
    ratio is then 1). Each further component's token feature is drawn, then made uncorrelated with
    the node's other features over token_weight [d_vocab] (each token's frequency at input
    positions), so the components are separate features and not one feature written twice (a
    vocabulary too small for that gives fewer). Drawn from a stream of their own, so every other
    draw of the distractors is unchanged."""
    if not 1 <= components <= MAX_COMPONENTS:
        raise ValueError(f"components must be in [1, {MAX_COMPONENTS}], got {components}")
    if components == 1 or not distractors:
        return tuple(distractors)
    rng = np.random.default_rng([seed, 0xC0315])
    n = len(distractors)
    ratios = np.exp(np.log(components) * (np.arange(n) + 0.5) / n)[rng.permutation(n)]
    out = []
    for d, ratio in zip(distractors, ratios):
        top = components if d.node.startswith("m") else min(components, d_head)
        ratio = float(min(ratio, top))
        k = max(1, math.ceil(ratio - 1e-9))
        if k == 2 and shares_for(ratio, 2)[0] < MIN_SHARE:
            k = 1
        drawn = [rng.uniform(-1.0, 1.0, len(d.feature)) for _ in range(k - 1)]
        features = uncorrelated(np.asarray(d.feature), drawn, token_weight)
        k = len(features) + 1
        out.append(dataclasses.replace(d, components=tuple(tuple(float(v) for v in f) for f in features),
                                       shares=shares_for(min(ratio, k), k) if k > 1 else ()))
    return tuple(out)


def uncorrelated(first: np.ndarray, drawn: Sequence[np.ndarray], weight: np.ndarray) -> list[np.ndarray]:
    """The drawn features [V] made uncorrelated with `first` and with each other under token weights
    [V] (Gram-Schmidt on the weighted, centred features), each scaled to max |value| 1; those left
    with nothing once the others are taken out (a small vocabulary) are dropped."""
    w = weight / weight.sum()

    def centred(f: np.ndarray) -> np.ndarray:
        return f - (w * f).sum()

    basis, out = [centred(first)], []
    for f in drawn:
        v = centred(f)
        for b in basis:
            v = v - (w * v * b).sum() / max((w * b * b).sum(), 1e-12) * b
        if (w * v * v).sum() < 1e-6 * (w * centred(f) ** 2).sum():
            continue
        basis.append(v)
        out.append(v / np.abs(v).max())
    return out


def component_name(node: str, j: int) -> str:
    """The name under which component j + 1 (the first further one: j = 0) of `node`'s target is
    reported (training.json's distractor R² per node): node/2, node/3."""
    return f"{node}/{j + 2}"


def component_names(distractors: Sequence[Distractor]) -> list[str]:
    """component_name of every further component, in ComponentTargets' order."""
    return [component_name(d.node, j) for d in distractors for j in range(len(d.shares))]


def as_distractors(d: Distractor) -> tuple[Distractor, ...]:
    """d's further components, each as a one-scalar distractor of its own (d's kind, offset, position,
    profile; its own feature)."""
    return tuple(dataclasses.replace(d, feature=f, components=(), shares=()) for f in d.components)


@dataclasses.dataclass(frozen=True)
class ComponentTargets:
    """The further components of every busy node's target, standardised on the training inputs."""

    node: torch.Tensor
    """long [E]: the row of each component's node in the distractors' DistractorTargets."""
    ratio: torch.Tensor
    """[E]: sqrt(share), each component's standard deviation / its node's first component's."""
    parts: DistractorTargets
    """The components as distractors of their own: their per-position standardisation and slots."""

    @classmethod
    def fit(cls, main: DistractorTargets, tokens: torch.Tensor, mask: torch.Tensor,
            positions: torch.Tensor) -> ComponentTargets | None:
        """From the distractors of `main` (None when none has a further component); tokens, mask
        and positions [N, T] the training inputs main was fitted on."""
        rows = [(i, part, share) for i, d in enumerate(main.distractors)
                for part, share in zip(as_distractors(d), d.shares)]
        if not rows:
            return None
        slots = [tuple(main.slots[i].tolist()) for i, _, _ in rows]
        parts = DistractorTargets.fit(tuple(p for _, p, _ in rows), slots, tokens, mask, positions, causal=main.causal)
        return cls(torch.tensor([i for i, _, _ in rows], dtype=torch.long),
                   torch.tensor([s for _, _, s in rows], dtype=torch.float32).sqrt(), parts)

    def to(self, device: torch.device) -> ComponentTargets:
        """The same components with every tensor on `device` (the model's)."""
        return ComponentTargets(self.node.to(device), self.ratio.to(device), self.parts.to(device))

    @property
    def slots(self) -> torch.Tensor:
        """long [E, 2]: (layer, slot) of each component's node."""
        return self.parts.slots

    def standardised(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[E, B, T] the components' per-position standardised raw targets of these inputs."""
        return self.parts.standardised(tokens, mask)

    def extend(self, target: torch.Tensor, pred: torch.Tensor, z: torch.Tensor, scales: torch.Tensor,
               node_out: torch.Tensor, probes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The first components' target and readout [D, B, T] followed by the further ones' [E, B, T]:
        from their standardised targets z [E, B, T], the first components' scales [D, B] (`targets`),
        their nodes' outputs node_out [E, B, T, d] and probe directions [E, d]."""
        return (torch.cat([target, self.targets(z, scales)]),
                torch.cat([pred, readout(node_out, probes)]))

    def targets(self, z: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        """[E, B, T] the components' targets from standardised ones z [E, B, T] and the first
        components' standard deviations scales [D, B] (siit.loudness.Loudness.scales): zero-mean,
        each ratio x its node's."""
        return z * (scales[self.node] * self.ratio[:, None])[..., None]
