"""A trained low-level model + its validation pairs -> how far each IIT intervention moves the logits,
not only the answer: validation.json's `logit_shifts`, for models with joint interchanges
(siit.correspondence.Correspondence.joint).

A redundant circuit hides from a method only if one copy's interchange leaves the logits, which
methods score, close to where they were; the answer alone stays put under a sum of votes while the
logits move by a third. For each intervention (every high-level node alone, then each joint group):

- `relative_shift`: the mean square change of the centred logits over labelled positions, relative
  to their clean mean square (0: the logits did not move; centred, because a shift every class shares
  changes no probability);
- `mean_abs_answer_logit_shift`: mean |change| of the clean answer's logit;
- `answer_changed`: the fraction of labelled positions whose answer changed.

`grouped`: the largest of these over the nodes of joint groups, each interchanged alone, beside the
smallest over the joint groups: one copy's shift beside the copies' together.
"""

from __future__ import annotations

from typing import Any

import torch

from siit.interventions import interchange
from siit.metrics import Evaluator
from siit.transformer import Transformer


def relative_logit_shift(logits: torch.Tensor, clean: torch.Tensor, label_mask: torch.Tensor) -> torch.Tensor:
    """Mean square change of the centred logits [N, T, V] from the clean run's over labelled
    positions [N, T], divided by the clean centred logits' mean square."""
    clean = (clean - clean.mean(-1, keepdim=True))[label_mask]
    moved = (logits - logits.mean(-1, keepdim=True))[label_mask] - clean
    return moved.pow(2).mean() / clean.pow(2).mean().clamp(min=1e-12)


def logit_shifts(model: Transformer, evaluator: Evaluator, acts: torch.Tensor) -> dict[str, Any]:
    """validation.json's `logit_shifts` on the evaluator's pairs (its IIT sources); acts: the
    clean node activations [L, N, T, S, d] of its data."""
    corr, d = evaluator.correspondence, evaluator.data
    lm = d.label_mask
    rows: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        clean = model(d.tokens, d.mask, present=d.present)[0]  # [N, T, V]
        answer = clean.argmax(-1, keepdim=True)
        source = acts[:, evaluator.sources]
        for name, mask in zip(corr.interventions, corr.low_masks().to(d.tokens.device)):
            out = interchange(model, d.tokens, d.mask, source, mask, d.present)
            moved = (out.gather(-1, answer) - clean.gather(-1, answer))[..., 0][lm]
            rows[name] = {"relative_shift": round(float(relative_logit_shift(out, clean, lm)), 6),
                          "mean_abs_answer_logit_shift": round(float(moved.abs().mean()), 6),
                          "answer_changed": round(float((out.argmax(-1) != answer[..., 0])[lm].float().mean()), 6)}
    joint = ["+".join(g) for g in corr.joint]
    alone = sorted({n for g in corr.joint for n in g}, key=corr.high_nodes.index)
    grouped = None if not joint else {
        "nodes": alone,
        **{f"{key}_alone_max": max(rows[n][key] for n in alone) for key in ("relative_shift", "mean_abs_answer_logit_shift")},
        **{f"{key}_joint_min": min(rows[g][key] for g in joint) for key in ("relative_shift", "mean_abs_answer_logit_shift")}}
    return {"per_intervention": rows, "grouped": grouped,
            "definition": "each IIT intervention on the validation pairs: relative_shift = mean square change of "
                          "the centred logits over labelled positions / their clean mean square; "
                          "mean_abs_answer_logit_shift = mean |change| of the clean answer's logit; answer_changed "
                          "= fraction of labelled positions whose answer changed; grouped: the largest over the "
                          "nodes of joint groups, each alone, and the smallest over the joint groups"}
