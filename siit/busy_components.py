"""A busy node's distractor -> a target of several scalars (issue 32: busy work that carries more than one).

A busy node that writes one scalar along one direction has an output covariance of rank one
(participation ratio 1.01-1.3 on the main entries, against 1.4-4 for circuit nodes), so ranking nodes
by the rank of what they write finds the circuit without an intervention. A real component writes
several features. Here a busy node's target gets up to `components - 1` further components: the same
kind of computation (the same source token, the same mean, the same MLP rule, at the same positions and
with the same per-position profile) on another token feature, each read along a probe direction of its
own, as a head that copies a token copies several of its features. How many of them a node writes
(its participation ratio, which sets the components' variance shares) follows the circuit's own during
training (siit.busy_ranks).

Loudness stays the node's: its target variance is split, the first component taking 1 / (1 + the
further components' shares) of it (ComponentTargets.first_shares, DistractorTargets.scales) and each further one `share` x the
first's, zero-mean (standardised per position as the first is), so the node's variance is what its
factor says and the calibration (siit.loudness) compares the whole node with it as before; what the
further components add to the node's norm is trimmed by the node's norm gain, as anything else it
writes beside its first direction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from siit.busy_ranks import FACTOR_RANGE, RankReference, fill_shares
from siit.distractors import Distractor, DistractorTargets, readout

MAX_COMPONENTS = 6
"""Most components a busy node's target has (TrainConfig.distractor_components): circuit MLPs of the
main cases write up to 5.9 directions (case 37's m0), and a busy MLP's ratio is drawn up to twice its
circuit's (siit.busy_ranks)."""
MIN_SHARE = 0.1
"""A further component whose share is under this is not yet a feature (noise beside the first): its
R² is not judged (siit.train_checks) and the card does not count it."""


def shares_for(ratio: float, k: int) -> tuple[float, ...]:
    """The k - 1 variance shares (each further component's variance / the first's) whose
    participation ratio (1 + sum a)² / (1 + sum a²) is `ratio` (1 <= ratio <= k), filled in order
    (siit.busy_ranks.fill_shares): the effective number of directions
    eval.core.looks.output_rank counts."""
    if k == 1:
        return ()
    r = torch.full((k - 1,), float(min(max(ratio, 1.0), k)), dtype=torch.float64)
    return tuple(float(v) for v in fill_shares(r, torch.arange(k - 1, dtype=torch.float64)))


def draw_components(distractors: Sequence[Distractor], components: int, token_weight: np.ndarray, seed: int,
                    d_head: int) -> tuple[Distractor, ...]:
    """Each distractor with up to `components` - 1 further token features (a head's total at most its
    width d_head) and a rank factor, drawn stratified log-even over siit.busy_ranks.FACTOR_RANGE and
    shuffled: the node's participation ratio is that factor x its type's circuit ratio, measured
    during training (siit.busy_ranks), so how many of the features it writes, and how loud each is,
    follow the circuit. Each further feature is drawn, then made uncorrelated with the node's other
    features over token_weight [d_vocab] (each token's frequency at input positions), so the
    components are separate features and not one feature written twice (a vocabulary too small for
    that gives fewer). Drawn from a stream of their own, so every other draw of the distractors is
    unchanged."""
    if not 1 <= components <= MAX_COMPONENTS:
        raise ValueError(f"components must be in [1, {MAX_COMPONENTS}], got {components}")
    if components == 1 or not distractors:
        return tuple(distractors)
    rng = np.random.default_rng([seed, 0xC0315])
    n = len(distractors)
    lo, hi = np.log(FACTOR_RANGE[0]), np.log(FACTOR_RANGE[1])
    factors = np.exp(lo + (hi - lo) * (np.arange(n) + 0.5) / n)[rng.permutation(n)]
    out = []
    for d, factor in zip(distractors, factors):
        top = components if d.node.startswith("m") else min(components, d_head)
        drawn = [rng.uniform(-1.0, 1.0, len(d.feature)) for _ in range(top - 1)]
        features = uncorrelated(np.asarray(d.feature), drawn, token_weight)
        out.append(dataclasses.replace(d, components=tuple(tuple(float(v) for v in f) for f in features),
                                       rank_factor=round(float(factor), 6) if features else None))
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
    return [component_name(d.node, j) for d in distractors for j in range(len(d.components))]


def as_distractors(d: Distractor) -> tuple[Distractor, ...]:
    """d's further components, each as a one-scalar distractor of its own (d's kind, offset, position,
    profile; its own feature, read from the token even where d reads other nodes: siit.busy_reads)."""
    return tuple(dataclasses.replace(d, feature=f, components=(), rank_factor=None, reads=(), read_weights=())
                 for f in d.components)


@dataclasses.dataclass(frozen=True)
class ComponentTargets:
    """The further components of every busy node's target, standardised on the training inputs."""

    node: torch.Tensor
    """long [E]: the row of each component's node in the distractors' DistractorTargets."""
    index: torch.Tensor
    """long [E]: each component's place among its node's further components (0: the second)."""
    factor: torch.Tensor
    """[D] each busy node's rank factor (Distractor.rank_factor; 1 for a node without components)."""
    is_mlp: torch.Tensor
    """bool [D]: the busy node is an MLP (its ratio follows the circuit's MLPs, else its heads)."""
    count: torch.Tensor
    """long [D]: each busy node's components, the first included."""
    parts: DistractorTargets
    """The components as distractors of their own: their per-position standardisation and slots."""

    @classmethod
    def fit(cls, main: DistractorTargets, tokens: torch.Tensor, mask: torch.Tensor,
            positions: torch.Tensor) -> ComponentTargets | None:
        """From the distractors of `main` (None when none has a further component); tokens, mask
        and positions [N, T] the training inputs main was fitted on."""
        rows = [(i, j, part) for i, d in enumerate(main.distractors) for j, part in enumerate(as_distractors(d))]
        if not rows:
            return None
        slots = [tuple(main.slots[i].tolist()) for i, _, _ in rows]
        parts = DistractorTargets.fit(tuple(p for _, _, p in rows), slots, tokens, mask, positions, causal=main.causal)
        ds = main.distractors
        return cls(torch.tensor([i for i, _, _ in rows], dtype=torch.long),
                   torch.tensor([j for _, j, _ in rows], dtype=torch.long),
                   torch.tensor([d.rank_factor or 1.0 for d in ds], dtype=torch.float32),
                   torch.tensor([d.node.startswith("m") for d in ds], dtype=torch.bool),
                   torch.tensor([1 + len(d.components) for d in ds], dtype=torch.long), parts)

    def to(self, device: torch.device) -> ComponentTargets:
        """The same components with every tensor on `device` (the model's)."""
        return ComponentTargets(self.node.to(device), self.index.to(device), self.factor.to(device),
                                self.is_mlp.to(device), self.count.to(device), self.parts.to(device))

    @property
    def slots(self) -> torch.Tensor:
        """long [E, 2]: (layer, slot) of each component's node."""
        return self.parts.slots

    def standardised(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[E, B, T] the components' per-position standardised raw targets of these inputs."""
        return self.parts.standardised(tokens, mask)

    def shares(self, ranks: RankReference) -> torch.Tensor:
        """[E] each component's variance share (/ its node's first component's) at the circuit's
        held ratios (siit.busy_ranks); 0 under MIN_SHARE, where a component is no feature yet and a
        target of its size would weigh 1 / share in the loss, which normalises each target by its
        variance (siit.distractors.distractor_loss)."""
        shares = fill_shares(ranks.ratios(self.factor, self.is_mlp, self.count)[self.node], self.index.to(self.factor.dtype))
        return torch.where(shares >= MIN_SHARE, shares, torch.zeros_like(shares))

    def first_shares(self, shares: torch.Tensor) -> torch.Tensor:
        """[D] the first component's part of its node's variance, 1 / (1 + its further shares [E])."""
        return 1.0 / (1.0 + torch.zeros_like(self.factor).index_add_(0, self.node, shares))

    def extend(self, target: torch.Tensor, pred: torch.Tensor, z: torch.Tensor, scales: torch.Tensor,
               shares: torch.Tensor, node_out: torch.Tensor, probes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The first components' target and readout [D, B, T] followed by those of the further ones
        with a share (E' of them, `shares` > 0; the rest are no features yet): from their standardised
        targets z [E, B, T], the first components' scales [D, B] (`targets`), the shares [E]
        (`shares`), their nodes' outputs node_out [E, B, T, d] and probe directions [E, d]."""
        on = (shares > 0).nonzero().flatten()
        return (torch.cat([target, self.targets(z, scales, shares)[on]]),
                torch.cat([pred, readout(node_out, probes)[on]]))

    def targets(self, z: torch.Tensor, scales: torch.Tensor, shares: torch.Tensor) -> torch.Tensor:
        """[E, B, T] the components' targets from standardised ones z [E, B, T], the first
        components' standard deviations scales [D, B] (siit.loudness.Loudness.scales) and the
        shares [E]: zero-mean, each sqrt(share) x its node's first."""
        return z * (scales[self.node] * shares.sqrt()[:, None])[..., None]
