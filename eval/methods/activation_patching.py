"""Model + task -> node scores by activation patching: m(clean) - m(one component ablated)."""

from __future__ import annotations

from typing import Any

from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodOutput
from eval.patching.ablation import behaviour, behaviour_tensor, make_context, node_metrics
from eval.patching.task import TaskData


def activation_patching(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: str = "resample") -> MethodOutput:
    """m(clean) - m(component ablated); components batched as row blocks, each pass starting at its
    earliest component's block (eval.patching.ablation.node_metrics)."""
    ctx = make_context(model, task, graph, ablation)  # type: ignore[arg-type]
    full = behaviour(task, ctx.forward())
    ablated = node_metrics(ctx, [[c] for c in graph.components], lambda logits: behaviour_tensor(task, logits))
    return MethodOutput(node_scores={c: full - v for c, v in zip(graph.components, ablated)})


METHODS = (
    Method(key="activation_patching", name="Activation patching", function=activation_patching, seeded=True,
           description="m(clean) - m(one component ablated)"),
)
