"""The circuit's output rank during training -> how many directions each busy node writes (issue 32).

A busy node with further components (siit.busy_components) writes as many directions as its target's
participation ratio. Drawn over one fixed range ([1, K]), that put the circuit below most busy nodes
where its heads write about one direction (cases 3, 4, 20) and above every one of them where one MLP
writes a function of the token (ratios 2.5-5.9: cases 8, 29, 33-37; docs/results.md). So a busy
node's ratio is its drawn factor (log-even over [1/2, 2]) times a running measurement of the circuit's
own, per component type: the median participation ratio of the circuit's heads for a busy head, of
its MLPs for a busy MLP (a type the circuit lacks takes the other's), measured as
eval.core.looks.activations.output_rank measures it (each output minus its position's mean over the
inputs, pooled over positions). The components' variance shares follow the measurement through
training, as the loudness targets follow siit.loudness's reference, but only past a band (HOLD_BAND):
a target that moves costs its R². (Fixed after the first 200 steps instead, `zoo train --all` met 14 of
the 16 main cases, against 15 following throughout, with the same looks; docs/results.md.)
"""

from __future__ import annotations

import torch
from torch import nn

RANK_MOMENTUM = 0.9
"""Of the running ratios (siit.loudness.REFERENCE_MOMENTUM's value, for the same batch noise)."""
HOLD_BAND = 1.25
"""The shares follow a held copy of the running ratios, moved to them only when they differ by more
than this factor: the distractor R² is judged against the target as it is now, and batch noise and the
circuit's own learning move the running ratios by 10-30% from step to step early on (case 33's between
2.0 and 3.2)."""
FACTOR_RANGE = (0.5, 2.0)
"""A busy node's ratio / its type's circuit ratio, drawn log-even over this range."""


def participation(out: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[N] participation ratio (tr C)² / tr C² of each node's output covariance C (no eigenvalues
    needed) from outputs out [N, B, T, d] and position weights [B, T]: each output minus its
    position's weighted mean, pooled over positions (0 for a node that never varies)."""
    w = weight.to(out.dtype)
    mean = (out * w[..., None]).sum(1) / w.sum(0).clamp(min=1e-9)[:, None]  # [N, T, d]
    c = (out - mean[:, None]) * w.sqrt()[..., None]
    cov = torch.einsum("nbtd,nbte->nde", c, c)  # [N, d, d]
    trace = cov.diagonal(dim1=1, dim2=2).sum(-1)
    return torch.where(trace > 1e-12, trace**2 / (cov**2).sum((1, 2)).clamp(min=1e-24), torch.zeros_like(trace))


def fill_shares(ratio: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[E] each further component's variance / its node's first component's, from its node's ratio
    [E] (>= 1) and its index among the node's further components [E] (0: the second component).
    Components fill in order: for a ratio in [n, n + 1] the first n take share 1 and the next a, where
    (n + a)² / (n + a²) = ratio (increasing in a over [0, 1]), so each share moves continuously with
    the ratio and the node's participation ratio is `ratio` exactly."""
    n = ratio.floor()
    r = ratio.clamp(min=1.0)
    disc = (n * n - n * (r - 1) * (r - n)).clamp(min=0.0)
    a = torch.where(r > 1 + 1e-9, (n - disc.sqrt()) / (r - 1).clamp(min=1e-9), torch.zeros_like(r))
    k = index + 2  # the component's number, the first being 1
    return torch.where(k <= n, torch.ones_like(r), torch.where(k == n + 1, a.clamp(0.0, 1.0), torch.zeros_like(r)))


class RankReference(nn.Module):
    """The circuit's running participation ratio per type (a buffer, so a checkpoint holds it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("reference", torch.zeros(2))
        """(heads, MLPs): median participation ratio of the circuit's nodes of each type, a running
        average; 0 before the first measurement."""
        self.register_buffer("held", torch.zeros(2))
        """What the shares follow: `reference` when it last moved more than HOLD_BAND from here."""

    @torch.no_grad()
    def track(self, circuit: torch.Tensor, weight: torch.Tensor, is_mlp: torch.Tensor,
              momentum: float = RANK_MOMENTUM) -> None:
        """One source run's circuit outputs [C, B, T, d], position weights [B, T] and is_mlp bool [C]."""
        if circuit.shape[0] == 0 or int((weight > 0).any(1).sum()) < 2:
            return
        pr = participation(circuit.detach().double(), weight.double()).float()
        both = [pr[is_mlp == m].median() if bool((is_mlp == m).any()) else None for m in (False, True)]
        both = [b if b is not None else next(x for x in both if x is not None) for b in both]
        measured = torch.stack(both)
        fresh = bool((self.reference == 0).all())
        self.reference.copy_(measured if fresh else momentum * self.reference + (1 - momentum) * measured)
        ratio = self.reference.clamp(min=1e-6) / self.held.clamp(min=1e-6)
        if fresh or bool(((ratio > HOLD_BAND) | (ratio < 1 / HOLD_BAND)).any()):
            self.held.copy_(self.reference)

    def ratios(self, factor: torch.Tensor, is_mlp: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """[D] each busy node's wanted participation ratio: its factor [D] x its type's held reference
        (is_mlp bool [D]), within [1, count] (count [D]: its components, the first included)."""
        ref = torch.where(is_mlp, self.held[1], self.held[0]).clamp(min=1.0)
        return torch.minimum((factor * ref).clamp(min=1.0), count.to(factor.dtype))
