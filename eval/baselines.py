"""Model + task data -> node scores or circuits: the built-in baselines, run for real.

Each is an ordinary method (see eval.methods): random scores, node activation patching,
gradient attribution, ablation scanning and greedy circuit discovery (CAUSAL-BENCH §2.3, here
measured on the model instead of simulated).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from eval import acdc, edge_patching, ensemble, ifr, subnetwork_probing
from eval.ablation import AblationContext, behaviour, behaviour_tensor, make_context, node_metrics
from eval.faithfulness import greedy_path, node_behaviour
from eval.graph import ComputationGraph
from eval.methods import Method, MethodOutput
from eval.task import TaskData

GREEDY_THRESHOLDS = (0.8, 0.5, 0.6, 0.7, 0.9, 0.95, 0.99)
"""Faithfulness floors; the first (CAUSAL-BENCH's 0.8) is the method's chosen circuit, the rest
give the extra ROC points for the pessimistic AUROC."""


def random_scores(model: Any, task: TaskData, *, graph: ComputationGraph, seed: int) -> MethodOutput:
    """Uniform scores in [-1, 1] per component (MIB's random control)."""
    rng = np.random.default_rng(seed)
    return MethodOutput(node_scores={c: float(v) for c, v in zip(graph.components, rng.uniform(-1, 1, len(graph.components)))})


def activation_patching(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: str = "resample") -> MethodOutput:
    """m(clean) - m(component ablated); components batched as row blocks, each pass starting at its
    earliest component's block (eval.ablation.node_metrics)."""
    ctx = make_context(model, task, graph, ablation)  # type: ignore[arg-type]
    full = behaviour(task, ctx.forward())
    ablated = node_metrics(ctx, [[c] for c in graph.components], lambda logits: behaviour_tensor(task, logits))
    return MethodOutput(node_scores={c: full - v for c, v in zip(graph.components, ablated)})


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


def ablation_scan(model: Any, task: TaskData, *, graph: ComputationGraph) -> MethodOutput:
    """Ablate each component alone under resample, mean and zero ablation; score = the largest
    normalised effect |m(N) - m(N \\ c)| / |m(N) - m(∅)| over the three (thorough, over-identifies)."""
    scores = {c: 0.0 for c in graph.components}
    for kind in ("resample", "mean", "zero"):
        ctx: AblationContext = make_context(model, task, graph, kind)
        full = behaviour(task, ctx.forward())
        # Every single ablation and the all-ablated anchor, batched (eval.ablation.node_metrics).
        values = node_metrics(ctx, [*([c] for c in graph.components), graph.components],
                              lambda logits: behaviour_tensor(task, logits))
        span = abs(full - values[-1]) or 1.0
        for c, value in zip(graph.components, values):
            scores[c] = max(scores[c], abs(full - value) / span)
    return MethodOutput(node_scores=scores)


def greedy_discovery(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: str = "resample") -> MethodOutput:
    """Start from every component; remove the one whose absence lowers faithfulness least while
    faithfulness stays >= the floor. One circuit per floor in GREEDY_THRESHOLDS (one shared path)."""
    nb = node_behaviour(make_context(model, task, graph, ablation))  # type: ignore[arg-type]
    path = greedy_path(nb, graph.components)
    return MethodOutput(circuits=tuple(
        {"param": t, "nodes": sorted(path.circuit(t))} for t in GREEDY_THRESHOLDS  # type: ignore[misc]
    ))


BUILTIN_METHODS = (
    Method(key="random", name="Random", function=random_scores,
           description="uniform scores in [-1, 1] per component"),
    Method(key="activation_patching", name="Activation patching", function=activation_patching, seeded=True,
           description="m(clean) - m(one component ablated)"),
    Method(key="gradient_attribution", name="Gradient attribution", function=gradient_attribution,
           description="(activation - reference) x gradient of m"),
    Method(key="ablation_scan", name="Ablation scan", function=ablation_scan,
           description="largest normalised effect of ablating one component (resample, mean, zero)"),
    Method(key="greedy", name="Greedy discovery", function=greedy_discovery,
           description="remove the least-needed component while faithfulness >= 0.8"),
)
BUILTIN_METHODS += (*edge_patching.METHODS, *acdc.METHODS, *subnetwork_probing.METHODS, *ifr.METHODS,
                    *ensemble.METHODS)  # the edge-level methods (issue 10)
REGISTRY = types.MappingProxyType({m.key: m for m in BUILTIN_METHODS})
"""Read-only: register your own by passing a Method (or package.module:function) instead."""
