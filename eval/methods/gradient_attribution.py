"""Model + task -> node scores by gradient attribution: (activation - reference) x gradient of the behaviour."""

from __future__ import annotations

from typing import Any

from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodOutput
from eval.patching.ablation import behaviour_tensor, make_context
from eval.patching.task import TaskData


def gradient_attribution(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: str = "resample") -> MethodOutput:
    """Activation × gradient: Σ (a - a_ref) · ∂m/∂a over batch, positions and d_model.

    a_ref is the ablation reference (counterfactual activation by default); with `zero`
    ablation this is exactly activation × gradient. It is the first-order estimate of patching.
    """
    ctx = make_context(model, task, graph, ablation)  # type: ignore[arg-type]
    run = ctx.adapter.run(task.tokens, task.mask, read_outputs=graph.components, grad=True)
    behaviour_tensor(task, run.logits).backward()
    scores = {}
    for c in graph.components:
        act = run.outputs[c]
        scores[c] = float(((act - ctx.reference[c]) * act.grad).detach().sum())
    model.zero_grad(set_to_none=True)
    return MethodOutput(node_scores=scores)


METHODS = (
    Method(key="gradient_attribution", name="Gradient attribution", function=gradient_attribution,
           description="(activation - reference) x gradient of m"),
)
