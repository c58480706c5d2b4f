"""The evaluator: computation graph and names, method interface, metrics, reports and plots.

`eval.evaluate(target, methods)` is the one call on a `Target` (model, ground truth, task);
`zoo.evaluate` builds the Target from an entry or a case id. eval is the bottom package: it
imports no other package of the project.
Exports resolve lazily, because the CLI imports `eval.core.circuit` and must not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Circuit": "eval.core.circuit", "parse_node": "eval.core.circuit", "promote": "eval.core.circuit",
    "ComputationGraph": "eval.core.graph", "graph_of": "eval.core.graph", "mib_edge_count": "eval.core.graph",
    "TaskData": "eval.patching.task", "make_task": "eval.patching.task",
    "Method": "eval.methods.interface", "MethodOutput": "eval.methods.interface", "CircuitRun": "eval.methods.interface",
    "MethodError": "eval.methods.interface", "read_score_file": "eval.methods.interface", "to_score_file": "eval.methods.interface",
    "REGISTRY": "eval.methods.registry",
    "roc": "eval.core.metrics", "pessimistic_auroc": "eval.core.metrics", "prf": "eval.core.metrics", "jaccard": "eval.core.metrics",
    "mean_pairwise_jaccard": "eval.core.metrics", "convergence": "eval.core.metrics", "compare_methods": "eval.scoring.stats",
    "vargha_delaney": "eval.scoring.stats", "pairwise_tests": "eval.scoring.stats",
    "causal_bench": "eval.scoring.faithfulness", "mib_curve": "eval.scoring.faithfulness",
    "EvalReport": "eval.evaluator.report", "table": "eval.evaluator.report",
    "Settings": "eval.evaluator.evaluate", "Target": "eval.evaluator.evaluate", "evaluate": "eval.evaluator.evaluate",
    "write_plots": "eval.evaluator.plots",
    "BenchEntry": "eval.leaderboard.cells", "BenchMethod": "eval.leaderboard.cells", "BenchSettings": "eval.leaderboard.cells", "run_bench": "eval.leaderboard.cells",
    "Leaderboard": "eval.leaderboard.table", "write_bench_plots": "eval.leaderboard.plots",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'eval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
