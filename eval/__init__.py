"""The evaluator: computation graph and names, method interface, metrics, reports and plots.

`eval.evaluate(target, methods)` is the one call on a `Target` (model, ground truth, task);
`zoo.evaluate` builds the Target from an entry or a case id. eval is the bottom package: it
imports no other package of the project.
Exports resolve lazily, because the CLI imports `eval.circuit` and must not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Circuit": "eval.circuit", "parse_node": "eval.circuit", "promote": "eval.circuit",
    "ComputationGraph": "eval.graph", "graph_of": "eval.graph", "mib_edge_count": "eval.graph",
    "TaskData": "eval.task", "make_task": "eval.task",
    "Method": "eval.methods", "MethodOutput": "eval.methods", "CircuitRun": "eval.methods",
    "MethodError": "eval.methods", "read_score_file": "eval.methods", "to_score_file": "eval.methods",
    "REGISTRY": "eval.baselines",
    "roc": "eval.metrics", "pessimistic_auroc": "eval.metrics", "prf": "eval.metrics", "jaccard": "eval.metrics",
    "mean_pairwise_jaccard": "eval.metrics", "convergence": "eval.metrics", "compare_methods": "eval.stats",
    "vargha_delaney": "eval.stats", "pairwise_tests": "eval.stats",
    "causal_bench": "eval.faithfulness", "mib_curve": "eval.faithfulness",
    "EvalReport": "eval.report", "table": "eval.report",
    "Settings": "eval.evaluation", "Target": "eval.evaluation", "evaluate": "eval.evaluation",
    "write_plots": "eval.plots",
    "BenchEntry": "eval.bench", "BenchMethod": "eval.bench", "BenchSettings": "eval.bench", "run_bench": "eval.bench",
    "Leaderboard": "eval.leaderboard", "write_bench_plots": "eval.bench_plots",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'eval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
