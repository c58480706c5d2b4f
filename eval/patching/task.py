"""A case + reference model -> the task data a circuit-discovery method sees.

Clean inputs come from `case.sample(n, seed)`, counterfactuals from a corruption style
(eval.core.corruption: an independent resample of the same case by default, or a minimal pair
`token:K`), and labels are the *reference* model's outputs (the compiled model's: the ground truth
of the task), on clean and on counterfactual inputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from eval.core.circuit import TaskKind
from eval.core.device import device_of
from eval.core.corruption import counterfactual_inputs
from eval.patching.hooks import forward


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskData:
    """Clean and counterfactual batches with the reference labels, all aligned position by position."""

    tokens: torch.Tensor
    """Clean token ids [batch, n_ctx] (BOS at position 0, PAD after the input)."""
    mask: torch.Tensor
    """Clean attention mask [batch, n_ctx], 1 on real tokens."""
    cf_tokens: torch.Tensor
    """Counterfactual token ids [batch, n_ctx] (resampled, or the clean input corrupted: `corruption`)."""
    cf_mask: torch.Tensor
    """Counterfactual attention mask [batch, n_ctx]."""
    labels: torch.Tensor
    """Reference output on clean inputs: class ids (long) or values (float), [batch, n_ctx]."""
    cf_labels: torch.Tensor
    """Reference output on counterfactual inputs, same layout."""
    positions: torch.Tensor
    """bool [batch, n_ctx]: positions that carry a label (real tokens of the clean input, not BOS)."""
    task_kind: TaskKind
    """"classification" (argmax over logits) or "regression" (logits[..., 0])."""
    seed: int
    """Seed the clean inputs were drawn with."""
    corruption: str = "resample"
    """How the counterfactuals were made (eval.core.corruption: `resample` or `token:K`)."""

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])

    def to(self, device: torch.device) -> TaskData:
        """The same data on `device` (the model's): inputs are drawn and labelled on the CPU, so the
        same seed gives the same task on every device."""
        return dataclasses.replace(self, **{f: getattr(self, f).to(device) for f in (
            "tokens", "mask", "cf_tokens", "cf_mask", "labels", "cf_labels", "positions")})


def reference_outputs(model: Any, tokens: torch.Tensor, mask: torch.Tensor, task_kind: TaskKind) -> torch.Tensor:
    """Labels from a reference model: argmax class ids, or the regression value. A hand-written
    high-level model (siit.high_level.HighLevelModel: not a torch module, `run(tokens, mask)` ->
    (labels, node values)) gives its labels directly."""
    if not isinstance(model, torch.nn.Module) and callable(getattr(model, "run", None)):
        with torch.no_grad():
            return model.run(tokens, mask)[0]
    device = device_of(model)  # labels come back to the CPU, where the task is made
    logits = forward(model, tokens.to(device), mask.to(device))  # masks read as TL 3.x does, whichever major
    return (logits.argmax(-1) if task_kind == "classification" else logits[..., 0].float()).to(tokens.device)


def make_task(*, case: Any, encoding: Any, reference: Any, n: int, seed: int,
              corruption: str = "resample") -> TaskData:
    """Task data for `case`: n clean inputs, n counterfactuals made by `corruption` (an independent
    resample by default), reference labels."""
    if n < 2:
        raise ValueError(f"need at least 2 inputs, got n={n}")
    clean = case.sample(n, seed)
    cf = counterfactual_inputs(case, clean, seed, corruption)
    tokens, mask = encoding.encode(clean)
    cf_tokens, cf_mask = encoding.encode(cf)
    positions = mask.bool().clone()
    positions[:, 0] = False  # BOS carries no label
    return TaskData(
        tokens=tokens, mask=mask, cf_tokens=cf_tokens, cf_mask=cf_mask,
        labels=reference_outputs(reference, tokens, mask, encoding.task_kind),
        cf_labels=reference_outputs(reference, cf_tokens, cf_mask, encoding.task_kind),
        positions=positions, task_kind=encoding.task_kind, seed=seed, corruption=corruption,
    )
