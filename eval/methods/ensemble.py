"""Several edge scorers' outputs -> one score per q/k/v edge: the mean of their normalised scores.

Parallel ensembling of the BlackboxNLP 2025 MIB shared task (Mondorf et al. 2025): the scores of
EAP, EAP-IG-inputs and EAP-IG-activations are merged per edge by the mean, which they found best
among mean, weighted mean, maximum and minimum. The methods' scores live on different scales (an
IG estimate is not an EAP estimate), so each method's scores are first divided by its largest
magnitude (signs kept, every method's top edge at ±1) and then averaged; an edge a method does not
score counts as 0 for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from eval.patching.ablation import AblationKind
from eval.methods.edge_patching import eap, eap_ig_activations, eap_ig_inputs, edge_patching
from eval.core.graph import ComputationGraph
from eval.methods.ifr import ifr
from eval.methods.interface import Method, MethodOutput
from eval.patching.task import TaskData

Scorer = Callable[..., MethodOutput]
SCORERS: Mapping[str, Scorer] = {"edge_patching": edge_patching, "eap": eap, "eap_ig_inputs": eap_ig_inputs,
                                 "eap_ig_activations": eap_ig_activations, "ifr": ifr}
"""The edge scorers an ensemble can merge, by registry key."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleOptions:
    """Which scorers to merge."""

    methods: tuple[str, ...] = ("eap", "eap_ig_inputs", "eap_ig_activations")
    """Registry keys of edge scorers (see SCORERS); the default is the shared task's P-Ens."""

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in SCORERS]
        if not self.methods or unknown:
            raise ValueError(f"ensemble methods must be a non-empty list of {', '.join(SCORERS)}; "
                             f"got {list(self.methods)}")


def normalised(scores: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Scores divided by their largest magnitude (all zeros stay zeros)."""
    top = max((abs(v) for v in scores.values()), default=0.0)
    return {e: (v / top if top > 0 else 0.0) for e, v in scores.items()}


def ensemble(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: AblationKind = "resample",
             options: EnsembleOptions = EnsembleOptions()) -> MethodOutput:
    """Mean over options.methods of each method's max-normalised edge scores."""
    total: dict[tuple[str, str], float] = {}
    for key in options.methods:
        scorer = SCORERS[key]
        out = scorer(model, task, graph=graph) if scorer is ifr else scorer(model, task, graph=graph, ablation=ablation)
        for edge, value in normalised(out.edge_scores or {}).items():
            total[edge] = total.get(edge, 0.0) + value
    return MethodOutput(edge_scores={e: v / len(options.methods) for e, v in total.items()})


METHODS = (
    Method(key="ensemble", name="Ensemble (EAP + EAP-IG)", function=ensemble, seeded=True,
           description="mean of the max-normalised scores of EAP, EAP-IG-inputs, EAP-IG-activations"),
)
