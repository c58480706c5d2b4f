"""LookInputs -> per-node values of the looks that read node outputs and attention patterns.

Each function returns {node: value}; a node a look does not apply to (an MLP has no attention
pattern) is left out, and the look ranks the others. Larger or smaller may mean "in the circuit":
the battery scores max(AUROC, 1 - AUROC).
"""

from __future__ import annotations

import torch

from eval.core.looks.inputs import LookInputs
from eval.core.node_heuristics import activation_stats


def output_norm(x: LookInputs) -> dict[str, float]:
    """Mean L2 norm of the node's output over real positions (eval.core.node_heuristics)."""
    return {n: activation_stats(a, x.positions)[0] for n, a in x.node_acts().items()}


def output_variance(x: LookInputs) -> dict[str, float]:
    """Variance of the output across inputs, per position, summed over d_model (eval.core.node_heuristics)."""
    return {n: activation_stats(a, x.positions)[1] for n, a in x.node_acts().items()}


def _last_positions(positions: torch.Tensor) -> torch.Tensor:
    """bool [batch, pos]: each row's last real position."""
    last = positions.long().sum(1) - 1
    out = torch.zeros_like(positions, dtype=torch.bool)
    out[torch.arange(len(last)), last.clamp(min=0)] = True
    return out & positions


def last_norm(x: LookInputs) -> dict[str, float]:
    """Mean output norm at each input's last position (where a causal model's answer is read)."""
    last = _last_positions(x.positions)
    return {n: float(a[last].norm(dim=-1).mean()) for n, a in x.node_acts().items()}


def last_variance(x: LookInputs) -> dict[str, float]:
    """Variance across inputs of the output at the last position, summed over d_model."""
    last = _last_positions(x.positions)
    return {n: float(a[last].var(dim=0, unbiased=True).sum()) if int(last.sum()) > 1 else 0.0
            for n, a in x.node_acts().items()}


def _centred_rows(act: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[n real positions, d]: each output minus the mean output at its position (over the inputs that
    have that position): the directions along which the node varies with the input."""
    w = positions.double()
    mean = (act * w[..., None]).sum(0) / w.sum(0).clamp(min=1)[:, None]  # [pos, d]
    return (act - mean)[positions]


def _spectrum(rows: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (descending) of the second-moment matrix of rows [n, d]."""
    cov = rows.T @ rows / max(rows.shape[0], 1)
    return torch.linalg.eigvalsh(cov).flip(0).clamp(min=0)


def _participation(eig: torch.Tensor) -> float:
    """(sum λ)² / sum λ²: the effective number of directions; 0 for a node that never varies."""
    total = float(eig.sum())
    return total * total / float((eig**2).sum()) if total > 1e-12 else 0.0


def output_rank(x: LookInputs) -> dict[str, float]:
    """Participation ratio of the output's covariance across inputs: how many directions the node's
    input-dependent write uses (a node that writes one scalar scores 1)."""
    return {n: _participation(_spectrum(_centred_rows(a, x.positions))) for n, a in x.node_acts().items()}


def raw_output_rank(x: LookInputs) -> dict[str, float]:
    """Participation ratio of the uncentred outputs' second moment: how many directions a reader sees,
    constant offsets included."""
    return {n: _participation(_spectrum(a[x.positions])) for n, a in x.node_acts().items()}


def first_pc_share(x: LookInputs) -> dict[str, float]:
    """Share of the output's variance across inputs along its first principal direction (1 for a node
    that writes one scalar, or none)."""
    out = {}
    for n, a in x.node_acts().items():
        eig = _spectrum(_centred_rows(a, x.positions))
        total = float(eig.sum())
        out[n] = float(eig[0]) / total if total > 1e-12 else 1.0
    return out


def position_spread(x: LookInputs) -> dict[str, float]:
    """Participation ratio over positions of the output's variance across inputs (per position, among
    the inputs that have it; summed over d_model): how many positions the node's write depends on the
    input at. A head that fires at one position scores 1, a node busy everywhere about the number of
    positions. Output norm and variance averaged over positions cannot tell a node that varies hard at
    one position from one that varies a little everywhere; this can (planted large-circuit's circuit
    heads fire at one position each: norm²/variance 0.14 against 0.59 for busy heads working everywhere)."""
    w = x.positions.double()
    count = w.sum(0)  # [pos]
    out = {}
    for n, a in x.node_acts().items():
        mean = (a * w[..., None]).sum(0) / count.clamp(min=1)[:, None]  # [pos, d]
        var = (((a - mean) ** 2).sum(-1) * w).sum(0) / count.clamp(min=1)  # [pos]
        out[n] = _participation(var[count >= 2])
    return out


def attention_entropy(x: LookInputs) -> dict[str, float]:
    """Heads only: mean entropy (nats) of the attention pattern over real query positions."""
    p = x.patterns.double()  # [L, B, H, Tq, Tk]
    ent = -(p * torch.log(p.clamp(min=1e-30))).sum(-1)  # [L, B, H, Tq]
    w = x.positions.double()[None, :, None, :]  # real queries
    per_head = (ent * w).sum((1, 3)) / (w.sum((1, 3)) * 1.0).clamp(min=1)  # [L, H]
    nodes = x.nodes
    H = x.n_heads
    return {nodes[l * (H + 1) + h]: float(per_head[l, h]) for l in range(x.n_layers) for h in range(H)}
