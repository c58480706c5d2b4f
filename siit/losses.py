"""Logits -> targets, losses and correctness: CE on the high-level argmax for classification,
squared error with a hinge past half the tolerance for regression; only labelled positions (not
BOS, not PAD) count."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from eval.core.circuit import TaskKind


def targets_from_logits(logits: torch.Tensor, task_kind: TaskKind) -> torch.Tensor:
    """High-level logits [B, T, V] -> class ids [B, T] (argmax) or values [B, T]."""
    if task_kind == "classification":
        return logits.argmax(dim=-1)
    return logits[..., 0].detach().clone()


def output_loss(logits: torch.Tensor, targets: torch.Tensor, label_mask: torch.Tensor,
                task_kind: TaskKind, weight: torch.Tensor | None = None,
                hinge: tuple[float, float] = (0.0, 0.0)) -> torch.Tensor:
    """Mean loss over labelled positions: cross-entropy, or for regression `regression_loss` with
    hinge = (its weight, its margin) ((0, 0): mean squared error); with `weight` [B, T] the
    weighted mean (sum of weight x loss over labelled positions / sum of weight)."""
    if task_kind == "classification":
        if weight is None:
            return F.cross_entropy(logits[label_mask], targets[label_mask])
        each = F.cross_entropy(logits[label_mask], targets[label_mask], reduction="none")
    elif hinge[0] == 0 and weight is None:  # plain MSE, as before the hinge existed
        return F.mse_loss(logits[..., 0][label_mask], targets[label_mask])
    else:
        each = regression_loss(logits[..., 0][label_mask], targets[label_mask], *hinge)
    return each.mean() if weight is None else _weighted_mean(each, weight[label_mask])


def regression_loss(pred: torch.Tensor, target: torch.Tensor, hinge: float, margin: float) -> torch.Tensor:
    """Per-element e² + hinge · max(0, |e| - margin)², e = pred - target: squared error that weighs
    1 + hinge times as much (in its gradient) past the margin. The criterion counts positions
    within a tolerance, so a mean of squares, which a few near-misses barely move, can sit just
    short of it for thousands of steps (TrainConfig.regression_hinge)."""
    e = pred - target
    return e.pow(2) + hinge * torch.relu(e.abs() - margin).pow(2)


def template_loss(logits: torch.Tensor, targets: torch.Tensor, label_mask: torch.Tensor, margin: float,
                  weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean square distance of the centred logits [B, T, V] from the answer's template at labelled
    positions: margin x (one-hot of the target class - 1/V). Unlike cross-entropy, which only ranks
    the answer first, it pins every logit, so an intervention that leaves the answer alone must leave
    the logits alone too (the logit-level ground truth methods read)."""
    V = logits.shape[-1]
    centred = logits - logits.mean(-1, keepdim=True)
    target = margin * (F.one_hot(targets, V).to(logits.dtype) - 1.0 / V)
    each = (centred - target).pow(2).mean(-1)[label_mask]
    return each.mean() if weight is None else _weighted_mean(each, weight[label_mask])


def _weighted_mean(each: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sum(w x each) / sum(w) over the labelled positions both hold."""
    return (each * w).sum() / w.sum()


def last_position_weights(lengths: torch.Tensor, n_ctx: int, last: float) -> torch.Tensor:
    """float [N, n_ctx]: `last` at each row's last input position (index = its length, BOS at 0),
    1 elsewhere: InterpBench's IOI up-weights the answer token's IIT and SIIT losses x10."""
    w = torch.ones(lengths.shape[0], n_ctx)
    w[torch.arange(lengths.shape[0]), lengths] = last
    return w


def predictions(logits: torch.Tensor, task_kind: TaskKind) -> torch.Tensor:
    """The model's output per position: class id or value."""
    return logits.argmax(dim=-1) if task_kind == "classification" else logits[..., 0]


def agree(a: torch.Tensor, b: torch.Tensor, task_kind: TaskKind, tolerance: float) -> torch.Tensor:
    """bool [B, T]: outputs equal (classification) or within `tolerance` (regression)."""
    if task_kind == "classification":
        return a == b
    return (a - b).abs() < tolerance
