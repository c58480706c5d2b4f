"""LookInputs -> per-node values of the looks that read the model's output without intervening
(gradients of the model's own answer, linear probes of it, direct logit attribution), and of the
architecture's own priors (which layer, which kind of component).
"""

from __future__ import annotations

import torch

from eval.core.looks.inputs import LookInputs
from eval.core.looks.weights import _unembed
from eval.core.node_heuristics import activation_stats

PROBE_RIDGE = 1e-3
"""Ridge of the linear probes, relative to the mean eigenvalue of the features' second moment (keeps a
rank-deficient node's least squares well posed without shrinking a real signal)."""


def gradient_norm(x: LookInputs) -> dict[str, float]:
    """Mean over inputs of the norm of the gradient of the model's answer (LookInputs.grads) at the
    node's output, over all positions: how sensitive the answer is to what the node writes."""
    real = x.positions.double()[..., None]
    return {n: float(((g * real) ** 2).sum((1, 2)).sqrt().mean()) for n, g in x.node_grads().items()}


def gradient_x_activation(x: LookInputs) -> dict[str, float]:
    """Mean over inputs of |<output, gradient>| summed over positions and d_model: the first-order
    change of the answer if the node wrote nothing (saliency, no patching)."""
    acts, real = x.node_acts(), x.positions.double()[..., None]
    return {n: float((acts[n] * g * real).sum((1, 2)).abs().mean()) for n, g in x.node_grads().items()}


def _halves(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed split of n rows into fit and held-out halves (seeded: the battery is reproducible)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    return order[: n // 2], order[n // 2 :]


def _probe_score(feats: torch.Tensor, labels: torch.Tensor, classification: bool) -> float:
    """Held-out accuracy (classification) or R² (regression) of a ridge least-squares probe
    feats [n, d] -> labels [n]."""
    fit, held = _halves(feats.shape[0])
    X = torch.cat([feats, torch.ones(feats.shape[0], 1, dtype=feats.dtype)], dim=1)
    if classification:
        classes, y = torch.unique(labels, return_inverse=True)
        Y = torch.nn.functional.one_hot(y, len(classes)).double()
    else:
        Y = labels.double()[:, None]
    gram = X[fit].T @ X[fit]
    ridge = PROBE_RIDGE * float(gram.diagonal().mean()) + 1e-12
    coef = torch.linalg.solve(gram + ridge * torch.eye(gram.shape[0], dtype=gram.dtype), X[fit].T @ Y[fit])
    pred = X[held] @ coef
    if classification:
        return float((pred.argmax(1) == y[held]).double().mean())
    resid = float(((pred[:, 0] - Y[held, 0]) ** 2).sum())
    total = float(((Y[held, 0] - Y[held, 0].mean()) ** 2).sum())
    return 1.0 - resid / total if total > 1e-12 else 0.0


def probe(x: LookInputs) -> dict[str, float]:
    """Held-out score of a linear probe from the node's output at each labelled position to the
    model's answer there (accuracy for classification, R² for regression)."""
    where = x.label_positions
    if int(where.sum()) < 4:
        return {}
    labels = x.labels[where]
    classification = x.task_kind == "classification"
    return {n: _probe_score(a[where], labels, classification) for n, a in x.node_acts().items()}


def direct_logit_attribution(x: LookInputs) -> dict[str, float]:
    """Mean |direct contribution| of the node's output to the answer's logit at labelled positions:
    to the answer's logit minus the mean logit (classification), or to the output (regression)."""
    w_u = _unembed(x)  # [d, V] centred, or [d, 1]
    where = x.label_positions
    out = {}
    for n, a in x.node_acts().items():
        direct = a[where] @ w_u  # [n, V]
        if x.task_kind == "classification":
            direct = direct.gather(1, x.labels[where].long()[:, None])
        out[n] = float(direct[:, 0].abs().mean())
    return out


def logit_variance(x: LookInputs) -> dict[str, float]:
    """Variance across inputs of the node's direct contribution to the (centred) logits
    (eval.core.node_heuristics's logit_variance)."""
    w_u = _unembed(x)
    return {n: activation_stats(a @ w_u, x.positions)[1] for n, a in x.node_acts().items()}


def layer(x: LookInputs) -> dict[str, float]:
    """The architecture's prior: earlier components first (a node's layer, negated)."""
    return {n: -float(i // (x.n_heads + 1)) for i, n in enumerate(x.nodes)}


def is_mlp(x: LookInputs) -> dict[str, float]:
    """The architecture's prior: MLPs first (1 for an MLP, 0 for a head)."""
    return {n: float(n.startswith("m")) for n in x.nodes}
