"""The model being trained + its Setup -> validation metrics during training, and whether they
meet the criterion.

A periodic check evaluates the padded validation pairs and, only when those meet the criterion
under bidirectional attention, every input shape (causal models compute the same in every shape).
The clean run's node activations serve both the metrics' interventions and the distractors' R².
Once the nodes meet it, edge-level strictness adds the non-circuit edges: first those that lagged
at the last check of every edge, and every edge only when none of those lags (only such a check
can meet the criterion). A high-level model's saturated heads (siit.saturation) must reach their
margin first. Checks on a subset of the validation pairs were tried and dropped: adaptation (siit.adaptation) reads every check's
numbers, and subset numbers changed its decisions (case 3: 1850 steps instead of 1350).
"""

from __future__ import annotations

from typing import Any

import torch

from siit.busy_components import component_names
from siit.config import TrainConfig
from siit.data import SHAPES
from siit.distractors import node_outputs, r_squared, readout
from siit.edges import EdgeLayout
from siit.metrics import Evaluator, meets_criterion
from siit.saturation import SATURATED, Saturation, saturated_fraction
from siit.train_setup import Setup, Trainee
from siit.train_step import drawn_padded


def check(trainee: Trainee, s: Setup, config: TrainConfig,
          lagging: list[str] | None = None) -> tuple[dict[str, Any], bool, str]:
    """(metrics, met, what they were measured on: "padded" or "every_shape") of a periodic check.
    lagging: the edges below the edge criterion at the last check of every edge (None: measure
    every edge)."""
    judged = config.judged_metrics
    chain = [("padded", s.evaluator)] + ([("every_shape", s.final_evaluator)] if s.vary_shapes else [])
    for name, evaluator in chain:
        metrics = evaluate_trainee(trainee, s, evaluator, edges=False)
        # single edges (hundreds of patched runs) are first judged once every node meets the
        # criterion; from then on the lagging ones at every check (nodes judged on counterfactuals
        # of any length dip by a position now and then: case 3 measured its edges at 1 check in 8)
        floors = (config.criterion, config.distractor_r2, config.edge_criterion)
        if metrics.get("saturated_min", 1.0) < SATURATED:  # cheap, so judged before the edges
            return metrics, False, name
        if meets_criterion({**metrics, "edge_siia_min": 1.0}, judged, *floors) or lagging:
            metrics.update(_edges_in_two_steps(trainee, s, evaluator, config, lagging))
        if not meets_criterion(metrics, judged, *floors):
            return metrics, False, name
    if s.views:
        return _views_check(trainee, s, config, metrics)
    return metrics, True, name


def _views_check(trainee: Trainee, s: Setup, config: TrainConfig,
                 metrics: dict[str, Any]) -> tuple[dict[str, Any], bool, str]:
    """A multi-task bundle that meets the pooled criterion, judged again on each task's own rows and
    circuit (Setup.views): met only if every view meets it; `views` records each view's figures."""
    floors = (config.criterion, config.distractor_r2, config.edge_criterion)
    judged = tuple(m for m in config.judged_metrics if m != "distractor_r2")
    met, summary = True, {}
    for view in s.views:
        chain = [view.evaluator] + ([view.final_evaluator] if view.vary_shapes else [])
        for evaluator in chain:
            part = evaluate_trainee(trainee, view, evaluator, edges=config.trains_edges)
            ok = meets_criterion(part, judged, *floors)
            if not ok:
                break
        summary[view.name] = {
            "iia_min": part["iia_min"], "siia_min": part["siia_min"], "edge_siia_min": part.get("edge_siia_min"),
            "met": ok}
        met = met and ok
    return {**metrics, "views": summary}, met, "views"


def _edges_in_two_steps(trainee: Trainee, s: Setup, evaluator: Evaluator, config: TrainConfig,
                        lagging: list[str] | None) -> dict[str, Any]:
    """The edges that lagged at the last check of every edge, then, once none of those lags,
    every edge: only a check of every edge can meet the criterion. Measuring all ~470 of ioi's
    edges at every check cost more than the 25 steps between checks."""
    if lagging:
        part = edge_metrics(trainee, s, evaluator, only=lagging)
        if part["edge_siia_min"] < config.edge_criterion:
            return part
    return edge_metrics(trainee, s, evaluator)


def last_edge_check(history: list[dict[str, Any]], *, every_edge: bool = False) -> dict[str, Any] | None:
    """The metrics of the last check in `history` that measured edges (with every_edge, every
    one of them); None before any."""
    for record in reversed(history):
        metrics = record["metrics"] or {}
        if "edges_below_1" in metrics and (not every_edge or metrics.get("edges_checked") == "all"):
            return metrics
    return None


def lagging_edges(history: list[dict[str, Any]], config: TrainConfig) -> list[str] | None:
    """The edges below the edge criterion at the last check of every edge in `history`; None
    before any such check (the next check measures every edge)."""
    metrics = last_edge_check(history, every_edge=True)
    return None if metrics is None else [n for n, v in metrics["edges_below_1"].items() if v < config.edge_criterion]


def edge_metrics(trainee: Trainee, s: Setup, evaluator: Evaluator,
                 acts: torch.Tensor | None = None, only: list[str] | None = None) -> dict[str, Any]:
    """SIIA of every non-circuit edge patched alone (siit.edges), or of the edges named in `only`:
    the lowest, its edge, the edges below 1 and which edges were checked ("all" or "lagging");
    {} without edge-level strictness."""
    if s.non_circuit_edges is None:
        return {}
    layout = EdgeLayout(s.low_config["n_layers"], s.low_config["n_heads"])
    idx = s.non_circuit_edges.nonzero()  # [E, 2]
    names = [f"{a}->{b}" for a, b in layout.names(s.non_circuit_edges)]
    if only is not None:
        wanted = set(only)
        keep = [i for i, n in enumerate(names) if n in wanted]
        idx, names = idx[keep], [names[i] for i in keep]
    scores = evaluator.edge_siia(trainee.model, idx.to(evaluator.data.tokens.device), acts=acts)
    below = {n: round(float(v), 6) for n, v in zip(names, scores.tolist()) if v < 1}
    return {"edge_siia_min": min(below.values(), default=1.0),
            "worst_edge": min(below, key=below.get, default=None), "edges_below_1": below,
            "edges_checked": "all" if only is None else "lagging"}


def evaluate_trainee(trainee: Trainee, s: Setup, evaluator: Evaluator, *, edges: bool = True,
                     evaluation: tuple[torch.Tensor, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The evaluator's metrics, plus each distractor's R² on the validation inputs and, with
    `edges`, the non-circuit edges' SIIA (edge_metrics). evaluation: the model's clean node
    activations on the evaluator's data and Evaluator.evaluate's metrics from them, when the
    caller has them (siit.trainer keeps them for the validation); the metrics are added to."""
    d = evaluator.data
    if evaluation is None:
        with torch.no_grad():  # [L, N, T, S, d]: the clean run, read by the metrics and the R²
            acts = trainee.model(d.tokens, d.mask, return_acts=True, present=d.present)[1]
        metrics = evaluator.evaluate(trainee.model, acts=acts)
    else:
        acts, metrics = evaluation
    on_these = None if s.saturation is None else Saturation.build(s.high, s.corr, d.tokens, d.mask)
    if on_these is not None:  # a family's saturated heads (siit.saturation): part of the criterion; not busy heads
        hit = saturated_fraction(trainee.model, d.tokens, d.mask, acts, on_these, d.present)[0]
        metrics["saturated_min"] = round(float(hit.min()), 6)
    if edges:
        metrics.update(edge_metrics(trainee, s, evaluator, acts))
    targets = s.targets
    if targets is not None:
        with torch.no_grad():
            padded = None if d.shape_ids is None else drawn_padded(s, d.shape_ids)
            shares, first = trainee.component_shares(s)
            target = trainee.loudness.targets(targets, targets.standardised(d.tokens, d.mask), padded, first)
            pred = readout(node_outputs(acts, targets.slots), trainee.probes)
            names = [x.node for x in targets.distractors]
            if s.components is not None:  # the further components count as distractors of their own
                target, pred = s.components.extend(target, pred, s.components.standardised(d.tokens, d.mask),
                                                   trainee.loudness.scales(targets, padded, d.tokens.shape[0], first),
                                                   shares, node_outputs(acts, s.components.slots), trainee.component_probes)
                # extend leaves out the components with no share (not yet features): their R² is not judged
                names += [n for n, v in zip(component_names(targets.distractors), shares.tolist()) if v > 0]
            r2 = r_squared(pred, target, d.label_mask)
            for shape, part in metrics.get("by_shape", {}).items():
                rows = d.shape_ids == SHAPES.index(shape)
                r2_shape = r_squared(pred[:, rows], target[:, rows], d.label_mask[rows])
                worst = int(r2_shape.argmin())
                part.update(distractor_r2_min=round(float(r2_shape[worst]), 6),
                            worst_distractor=names[worst])
        per_node = {name: round(float(v), 6) for name, v in zip(names, r2)}
        metrics.update(distractor_r2_min=min(per_node.values()), distractor_r2_per_node=per_node)
    return metrics
