"""Model + task -> uniform random node scores: MIB's random control."""

from __future__ import annotations

from typing import Any

import numpy as np

from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodOutput
from eval.patching.task import TaskData


def random_scores(model: Any, task: TaskData, *, graph: ComputationGraph, seed: int) -> MethodOutput:
    """Uniform scores in [-1, 1] per component (MIB's random control)."""
    rng = np.random.default_rng(seed)
    return MethodOutput(node_scores={c: float(v) for c, v in zip(graph.components, rng.uniform(-1, 1, len(graph.components)))})


METHODS = (
    Method(key="random", name="Random", function=random_scores,
           description="uniform scores in [-1, 1] per component"),
)
