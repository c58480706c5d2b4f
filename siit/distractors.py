"""Out-of-circuit nodes -> work of their own: a distractor task per node, and the losses that keep
every component of a trained model busy while strictness keeps it irrelevant to the task.

Why: SIIT alone squashes out-of-circuit nodes towards zero output, so ranking nodes by activation
size finds the circuit without one intervention. In a real model every component is busy. Each
out-of-circuit node therefore gets a distractor: a scalar function of the input that the node's own
output must encode along a learned unit direction (a linear probe trained with the model). Heads
copy a token feature from 1 or 2 positions back or average it over the input; MLPs compute a
nonlinear function of the token and its position. How loud each busy node is follows the circuit:
a running estimate of the circuit nodes' output variance and mean output norm (the reference:
the two quantities eval.core.node_heuristics ranks nodes by) times per-node factors stratified over a span of
spread² (one for the variance, one for the squared mean norm, which a constant offset of the target
sets) with the reference at a quantile drawn from CIRCUIT_BAND, so that the circuit nodes rank
mid-pack in loudness rather than at either end, whatever the task makes them. The norm is matched,
not the squared mean: at equal rms a node with a large constant part has a larger mean norm than a
node that varies around zero (case 19's circuit MLPs were louder by mean norm than 10 of 11 busy
nodes whose variance and squared mean matched theirs). Circuit nodes also get a ceiling on their rms output norm: without it SIIT makes
them ever louder (REFERENCE.md, realism prototype).
The distractors live in training only; the entry records what each node was given to compute.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from siit.position_profiles import draw_profiles, one_position_spread, profiled_spread, varying_positions
from siit.target_offsets import offsets_for_norm, row_stats

DistractorKind = Literal["previous_token", "running_mean", "input_mean", "token_position"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Distractor:
    """What one out-of-circuit node is trained to compute besides nothing for the task."""

    node: str
    """Low-level node name (a{l}.h{h} or m{l})."""
    kind: DistractorKind
    """previous_token: the token feature `offset` positions back (BOS's feature before the input);
    running_mean: mean feature of the input tokens up to here (causal models); input_mean: mean
    feature of the whole input (bidirectional models); token_position: |feature - position code|
    of the token here (MLPs)."""
    offset: int
    """Positions back for previous_token (1 or 2); 0 otherwise."""
    variance_factor: float
    """Target variance / the circuit's reference variance."""
    offset_factor: float
    """(Target mean absolute value / the circuit's reference mean output norm)²; the target's
    constant offset is solved for it (offsets_for_norm)."""
    feature: tuple[float, ...]
    """A scalar feature per token id (BOS and PAD included), drawn with the seed."""
    position_code: tuple[float, ...]
    """A scalar per position, drawn with the seed (token_position only)."""
    at: int | None = None
    """The one position where the target varies (0 elsewhere), or None: every position. A model whose
    circuit heads each fire at one position (planted.large_circuit) gives its busy heads one too
    (DistractorPositions)."""
    profile: tuple[float, ...] | None = None
    """Relative variance of the target at each position (siit.position_profiles), or None: the same
    at every position."""
    components: tuple[tuple[float, ...], ...] = ()
    """Token features of the target's further components (siit.busy_components), or (): one scalar."""
    rank_factor: float | None = None
    """With components: the node's participation ratio / its type's circuit ratio (siit.busy_ranks),
    which sets the components' variance shares during training; None: one scalar."""
    reads: tuple[Distractor, ...] = ()
    """token_position and previous_token only: the earlier busy heads whose targets this node reads
    (siit.busy_reads) in place of its token feature, or (): it reads the token."""
    read_weights: tuple[float, ...] = ()
    """One weight per `reads`: the node's feature is the weighted sum of their raw targets."""

    def __post_init__(self) -> None:
        if len(self.reads) != len(self.read_weights):
            raise ValueError(f"{self.node}: {len(self.reads)} reads but {len(self.read_weights)} weights")
        if self.reads and self.kind not in ("token_position", "previous_token"):
            raise ValueError(f"{self.node}: a {self.kind} target reads no other node (siit.busy_reads)")

    def to_json(self) -> dict[str, Any]:
        out = {"node": self.node, "kind": self.kind, "offset": self.offset,
               "variance_factor": round(self.variance_factor, 6), "offset_factor": round(self.offset_factor, 6)}
        if self.profile is not None:
            out["profile"] = [round(v, 6) for v in self.profile]
        if self.rank_factor is not None:
            out["rank_factor"] = self.rank_factor
        if self.reads:
            out["reads"] = [r.node for r in self.reads]
            out["read_weights"] = [round(w, 6) for w in self.read_weights]
        return out if self.at is None else {**out, "at": self.at}


def stratified(n: int, spread: float, rng: np.random.Generator, quantile: float = 0.5) -> np.ndarray:
    """n factors, shuffled, at the centres of n + 1 log-even strata spanning about spread², with the
    stratum of the reference value 1 left empty: round(quantile x n) of them lie below 1, and none
    lies within one stratum of it (a factor of spread^(2/(n+1))). The gap keeps a reference node's
    rank where it was put: jittered factors can land next to 1, and then a few per cent of training
    noise moves the node past several others."""
    if n == 0:
        return np.zeros(0)
    k = int(round(quantile * n))
    strata = np.concatenate([np.arange(k), np.arange(k + 1, n + 1)])
    u = (strata - k) / (n + 1)  # the reference at the centre of stratum k
    return np.exp(2.0 * u * np.log(spread))[rng.permutation(n)]


CIRCUIT_BAND = (0.4, 0.6)
"""Where the circuit's reference sits among the busy nodes, as a quantile drawn per model: inside
the band every size heuristic ranks the circuit mid-pack (the realism bound), and where in the band
is random, so a circuit is not simply the median node."""


DistractorPositions = Literal["every", "one"]
"""Where a busy head's target varies. every: at every position. one: at one position per head, drawn
with the seed (0 elsewhere), for a model whose circuit heads each fire at one position: such a head's
output norm is small beside its variance (norm²/variance 0.14 for large-circuit's circuit heads, the
variance averaged over positions as eval.core.node_heuristics does), which no target varying everywhere
reaches (0.59 for its busy heads, about 0.64 at best for a scalar). Asked for both, the loudness
calibration trimmed all 69 busy heads' target norms to its floor, and their R² stayed at 0.78-0.87 over
4000 steps while each head's output held its target (an affine read of it: R² 0.96; docs/results.md)."""


def make_distractors(nodes: Sequence[str], *, d_vocab: int, n_ctx: int, causal: bool,
                     seed: int, spread: float, positions: DistractorPositions = "every",
                     profile: float = 0.0) -> tuple[Distractor, ...]:
    """One distractor per node, drawn reproducibly from `seed` (with positions "one", each head's
    position after everything else, so the other draws are those of "every"; then, with profile > 0,
    a per-position variance profile for every node that varies at more than one position)."""
    rng = np.random.default_rng([seed, 0x5EED])
    head_kinds = [("previous_token", 1), ("previous_token", 2), ("running_mean" if causal else "input_mean", 0)]
    # one factor per node for both: a node quiet by norm is quiet in variance too, so the offset
    # that gives its norm exists (at a large variance and a small norm it would not)
    variance = stratified(len(nodes), spread, rng, rng.uniform(*CIRCUIT_BAND))
    offset2 = variance
    out = []
    for i, node in enumerate(nodes):
        if node.startswith("m"):
            kind, offset = "token_position", 0
        else:
            kind, offset = head_kinds[int(rng.integers(len(head_kinds)))]
        out.append(Distractor(
            node=node, kind=kind, offset=offset, variance_factor=float(variance[i]), offset_factor=float(offset2[i]),
            feature=tuple(float(v) for v in rng.uniform(-1.0, 1.0, d_vocab)),
            position_code=tuple(float(v) for v in rng.uniform(-1.0, 1.0, n_ctx)),
        ))
    if positions == "one":  # a position with `offset` input tokens before it (a mean of two tokens at least)
        out = [d if d.kind == "token_position" else
               dataclasses.replace(d, at=int(rng.integers(1 + max(d.offset, 1), n_ctx))) for d in out]
    if profile > 0:
        varied = [i for i, d in enumerate(out) if d.at is None]
        for i, p in zip(varied, draw_profiles(len(varied), n_ctx, profile, rng)):
            out[i] = dataclasses.replace(out[i], profile=p)
    return tuple(out)


def raw_targets(d: Distractor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] unscaled target of distractor `d` at every position (meaningful at input positions)."""
    raw = _raw_everywhere(d, tokens, mask)
    if d.at is None:
        return raw
    return torch.where(torch.arange(raw.shape[1], device=raw.device) == d.at, raw, torch.zeros_like(raw))


def _raw_everywhere(d: Distractor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if d.reads:  # what the earlier busy heads computed, here: only their outputs carry it (siit.busy_reads)
        feat = sum(w * raw_targets(r, tokens, mask) for r, w in zip(d.reads, d.read_weights))
    else:
        feat = torch.tensor(d.feature, dtype=torch.float32, device=tokens.device)[tokens]  # [B, T]
    real = mask.to(torch.float32)
    if d.kind == "previous_token":  # positions that have no input token `offset` back read the first one
        src = (torch.arange(tokens.shape[1], device=tokens.device) - d.offset).clamp(min=1)
        return feat[:, src]
    inputs = real.clone()
    inputs[:, 0] = 0.0  # BOS is not part of the input
    if d.kind == "running_mean":
        return (feat * inputs).cumsum(1) / inputs.cumsum(1).clamp(min=1.0)
    if d.kind == "input_mean":
        mean = (feat * inputs).sum(1, keepdim=True) / inputs.sum(1, keepdim=True).clamp(min=1.0)
        return mean.expand_as(feat)
    code = torch.tensor(d.position_code, dtype=torch.float32, device=tokens.device)[: tokens.shape[1]]
    return (feat - code[None, :]).abs()


def bos_quiet(z: torch.Tensor, causal: bool) -> torch.Tensor:
    """z [..., T], with 0 at BOS (position 0) in a causal model: there a target is its constant
    offset. A causal node at BOS cannot see the input, and eval.core.node_heuristics counts BOS like every real
    position, so the node's output there must be as loud as the rest of the target without
    varying (as the circuit's does not vary there either). Bidirectional BOS sees the input."""
    if not causal:
        return z
    z = z.clone()
    z[..., 0] = 0.0
    return z


Z_SAMPLE = 4096
"""Standardised target values kept per distractor to solve its offset on."""


@dataclasses.dataclass(frozen=True)
class DistractorTargets:
    """Standardised, scaled targets of every distractor on a fixed token set."""

    distractors: tuple[Distractor, ...]
    slots: torch.Tensor
    """long [D, 2]: (layer, slot) of each distractor's node."""
    shift: torch.Tensor
    """[D, T]: mean of each raw target per position on the training inputs."""
    spread: torch.Tensor
    """[D, T]: standard deviation of each raw target per position on the training inputs."""
    z_sample: torch.Tensor
    """[D, N]: standardised targets at real positions of the training inputs (at most
    Z_SAMPLE of them, evenly spaced): the distribution the offsets are solved on."""
    causal: bool
    """Causal attention: targets are constant at BOS (bos_quiet)."""

    @classmethod
    def fit(cls, distractors: tuple[Distractor, ...], slots: list[tuple[int, int]],
            tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, *,
            causal: bool) -> DistractorTargets:
        """Per-position standardisation: every position's target varies across inputs with the
        node's scale (a running mean's spread shrinks along the input; standardised, it does not)."""
        w = positions.to(torch.float32)  # [B, T]
        count = w.sum(0).clamp(min=1.0)
        raw = torch.stack([raw_targets(d, tokens, mask) for d in distractors]) if distractors \
            else torch.zeros(0, *tokens.shape)
        shift = (raw * w).sum(1) / count
        spread = ((((raw - shift[:, None]) ** 2) * w).sum(1) / count).sqrt()
        overall = raw[:, positions].std(1, keepdim=True) if distractors else torch.zeros(0, 1)
        # a position where the target never varies keeps the global spread (its target is constant)
        live = spread > 1e-3 * overall  # [D, T]
        spread = torch.where(live, spread, overall).clamp(min=1e-6)
        varies = varying_positions(w, causal)
        spread = one_position_spread([d.at for d in distractors], spread, w.sum(0), varies)
        spread = profiled_spread([d.profile for d in distractors], spread, w.sum(0), live & varies)
        z = bos_quiet((raw - shift[:, None]) / spread[:, None], causal)[:, positions]  # [D, P]
        z = z[:, torch.linspace(0, z.shape[1] - 1, min(Z_SAMPLE, z.shape[1])).long()] if z.shape[1] else z
        return cls(distractors, torch.tensor(slots, dtype=torch.long).reshape(-1, 2), shift, spread, z, causal)

    def to(self, device: torch.device) -> DistractorTargets:
        """The same targets with every tensor on `device` (the model's)."""
        return dataclasses.replace(self, slots=self.slots.to(device), shift=self.shift.to(device),
                                   spread=self.spread.to(device), z_sample=self.z_sample.to(device))

    @functools.cached_property
    def z_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """z_sample's per-row median and mean |z|: fixed, so computed once, not every step."""
        return row_stats(self.z_sample)

    @functools.cached_property
    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[D] variance_factor and [D] sqrt(offset_factor), on the targets' device."""
        dev = self.shift.device
        return (torch.tensor([d.variance_factor for d in self.distractors], device=dev),
                torch.tensor([d.offset_factor for d in self.distractors], device=dev).sqrt())

    def wanted_norms(self, reference: torch.Tensor) -> torch.Tensor:
        """[D] mean output norm each node should have: sqrt(offset_factor) x reference[1]
        (reference [..., 2] gives [..., D])."""
        return self._factors[1] * reference[..., 1:2]

    def wanted_variances(self, reference: torch.Tensor) -> torch.Tensor:
        """[D] output variance each node should have: variance_factor x reference[0]
        (reference [..., 2] gives [..., D])."""
        return self._factors[0] * reference[..., 0:1]

    def standardised(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[D, B, T] the per-position standardised raw targets of these inputs. A function of each
        row alone, so training computes it once for its training set and indexes it every step."""
        raw = torch.stack([raw_targets(d, tokens, mask) for d in self.distractors])
        T = tokens.shape[1]
        return bos_quiet((raw - self.shift[:, None, :T]) / self.spread[:, None, :T], self.causal)

    def scaled(self, z: torch.Tensor, references: torch.Tensor, gain: torch.Tensor | None = None,
               first: torch.Tensor | None = None) -> torch.Tensor:
        """[K, D, B, T] targets from standardised ones z [D, B, T] (`standardised`), one per
        reference of references [K, 2]: variance variance_factor x reference[0], plus the constant
        offset that makes their mean absolute value sqrt(offset_factor) x reference[1] on the
        training inputs; `gain` [D, 2] multiplies the variance and the norm (calibration: what a
        node writes beside its target adds to both); `first` as in `scales`. The K offsets are solved together."""
        scale, norm = self.scales(references, gain, first), self.wanted_norms(references)  # [K, D]
        if gain is not None:
            norm = norm * gain[:, 1]
        K = references.shape[0]
        median, abs_mean = self.z_stats
        off = offsets_for_norm(self.z_sample.repeat(K, 1), scale.flatten(), norm.flatten(),
                               z_stats=(median.repeat(K), abs_mean.repeat(K))).reshape(K, -1)
        return z * scale[:, :, None, None] + off[:, :, None, None]

    def scales(self, references: torch.Tensor, gain: torch.Tensor | None = None,
               first: torch.Tensor | None = None) -> torch.Tensor:
        """[K, D] standard deviation of each target at each reference of references [K, 2] (`scaled`);
        `first` [D]: each target's part of its node's variance when the node has further components
        (siit.busy_components.ComponentTargets.first_shares), None: all of it."""
        var = self.wanted_variances(references)
        var = var if gain is None else var * gain[:, 0]
        return (var if first is None else var * first).sqrt()

    def __call__(self, tokens: torch.Tensor, mask: torch.Tensor, reference: torch.Tensor,
                 gain: torch.Tensor | None = None) -> torch.Tensor:
        """[D, B, T] targets of these inputs at one reference [2] (`scaled`)."""
        return self.scaled(self.standardised(tokens, mask), reference[None], gain)[0]


def node_outputs(acts: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """[N, B, T, d] outputs of the nodes at `slots` (long [N, 2]: layer, slot) from acts [L, B, T, S, d]."""
    return acts[slots[:, 0], :, :, slots[:, 1]]


def mean_norms(node_out: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[N] mean output norm of each node over `positions` [B, T] (eval.core.node_heuristics's output norm;
    float positions weight them)."""
    w = positions.to(node_out.dtype)
    return (node_out.norm(dim=-1) * w).sum((1, 2)) / w.sum().clamp(min=1e-12)


def readout(node_out: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """[D, B, T] projections of each distractor node's output on its unit direction.

    node_out [D, B, T, d] (node_outputs at the distractors' slots); directions [D, d] (normalised
    here: the probe cannot add gain, so the node's own output must carry the target's scale)."""
    unit = directions / directions.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    return torch.einsum("dbtk,dk->dbt", node_out, unit)


def distractor_loss(pred: torch.Tensor, target: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Mean over distractors of MSE / target variance at input positions: each node counts equally."""
    scale2 = target[:, positions].var(dim=1).clamp(min=1e-6)
    return (((pred - target)[:, positions] ** 2).mean(dim=1) / scale2).mean()


def variances(node_out: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[N] output variance of each node across inputs, per position and averaged over the input
    positions that at least two inputs have (eval.core.node_heuristics's output variance); node_out [N, B, T, d],
    positions [B, T] bool or float weights."""
    w = positions.to(node_out.dtype)
    count = w.sum(0).clamp(min=1e-12)  # [T]
    mean = (node_out * w[None, ..., None]).sum(1) / count[None, :, None]  # [N, T, d]
    var = (((node_out - mean[:, None]) ** 2).sum(-1) * w).sum(1) / count  # [N, T]
    keep = (w > 0).sum(0) >= 2
    return (var[:, keep] * count[keep]).sum(1) / count[keep].sum()


def loudness(node_out: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[2]: median over the given nodes' outputs node_out [C, B, T, d] of (output variance across
    inputs, per position and averaged over input positions; mean output norm over input positions),
    as eval.core.node_heuristics measures them."""
    node_out = node_out.detach()
    per_var = variances(node_out, positions)
    per_norm = mean_norms(node_out, positions)
    return torch.stack([per_var.quantile(0.5), per_norm.quantile(0.5)])


def r_squared(pred: torch.Tensor, target: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[D] coefficient of determination of each distractor at input positions."""
    t, p = target[:, positions], pred[:, positions]
    ss_res = ((t - p) ** 2).sum(1)
    ss_tot = ((t - t.mean(1, keepdim=True)) ** 2).sum(1).clamp(min=1e-12)
    return 1.0 - ss_res / ss_tot


def norm_match_loss(node_out: torch.Tensor, positions: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
    """Mean over the given nodes' outputs node_out [N, B, T, d] of (mean output norm / wanted - 1)²,
    norms over `positions` [B, T].

    The distractor fixes only the projection on the node's direction; what the node writes beside
    it adds norm, which this keeps from making the node louder than its factor says (measured on
    the same batch as the circuit's reference, so both see the same inputs)."""
    if node_out.shape[0] == 0:
        return node_out.new_zeros(())
    norm = mean_norms(node_out, positions)
    return ((norm / wanted.clamp(min=1e-6) - 1.0) ** 2).mean()


def norm_ceiling_loss(node_out: torch.Tensor, positions: torch.Tensor, ceiling: float) -> torch.Tensor:
    """Squared excess of each circuit node's rms output norm (over input positions) above `ceiling`;
    node_out [C, B, T, d] the circuit nodes' outputs."""
    if node_out.shape[0] == 0 or not math.isfinite(ceiling):
        return node_out.new_zeros(())
    node_out = node_out[:, positions]  # [C, P, d]
    rms = node_out.pow(2).sum(-1).mean(-1).sqrt()
    return torch.relu(rms - ceiling).pow(2).mean()
