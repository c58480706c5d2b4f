"""Model + task -> circuits by greedy discovery (CAUSAL-BENCH §2.3, measured on the model instead of simulated)."""

from __future__ import annotations

from typing import Any

from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodOutput
from eval.patching.ablation import make_context
from eval.patching.task import TaskData
from eval.scoring.faithfulness import greedy_path, node_behaviour

GREEDY_THRESHOLDS = (0.8, 0.5, 0.6, 0.7, 0.9, 0.95, 0.99)
"""Faithfulness floors; the first (CAUSAL-BENCH's 0.8) is the method's chosen circuit, the rest
give the extra ROC points for the pessimistic AUROC."""


def greedy_discovery(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: str = "resample") -> MethodOutput:
    """Start from every component; remove the one whose absence lowers faithfulness least while
    faithfulness stays >= the floor. One circuit per floor in GREEDY_THRESHOLDS (one shared path)."""
    nb = node_behaviour(make_context(model, task, graph, ablation))  # type: ignore[arg-type]
    path = greedy_path(nb, graph.components)
    return MethodOutput(circuits=tuple(
        {"param": t, "nodes": sorted(path.circuit(t))} for t in GREEDY_THRESHOLDS  # type: ignore[misc]
    ))


METHODS = (
    Method(key="greedy", name="Greedy discovery", function=greedy_discovery,
           description="remove the least-needed component while faithfulness >= 0.8"),
)
