"""A multi-task view (planted.multi_task) -> what its entry needs beyond a single-task one: the task
its weights are trained on (the bundle: every task's rows), and the validation of the trained
model as this task's ground truth, with every other task of the bundle validated the same way
(each is a benchmark entry of its own with the same weights) and the looks that never intervene
measured on every task's inputs too (a look at a model does not know which task a user studies).

Top level is standard library only (zoo.train_entry imports it); torch and siit are imported inside.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def training_task(task: Any) -> Any:
    """The task to train for `task`: its bundle's (every task's rows) for a view, else itself."""
    bundle = getattr(task, "bundle", None)
    return task if bundle is None else bundle.task()


def sibling_views(case: Any) -> tuple[Any, ...] | None:
    """The Cases of the other views of `case`'s bundle (`zoo train --all-views` writes them), or None
    when `case` is not a multi-task view."""
    if case.family != "planted":
        return None
    from planted.registry import bundle_views, get_planted

    views = bundle_views(case.id.partition(".")[0]) or []
    return tuple(get_planted(v).case for v in views if v != case.id) if case.id in views else None


def validate_view(result: Any, view: Any, device: Any) -> tuple[Any, dict[str, Any]]:
    """(the training result as view `view`'s, its validation.json) for a model trained on the
    view's bundle: validation on the view's own rows with its circuit, `tasks` (every view of the
    bundle: met, accuracy, IIA, SIIA, out-of-circuit bounds, edges) and the battery of looks on
    every task's inputs (`realism.battery_all_tasks`)."""
    _, view_result, validation = validate_views(result, view, device)[view.case.id]
    return view_result, validation


def validate_views(result: Any, view: Any, device: Any) -> dict[str, tuple[Any, Any, dict[str, Any]]]:
    """Every view of `view`'s bundle -> (its task, the training result as its, its validation.json,
    as validate_view gives it): one trained model, one benchmark entry per task (`zoo train
    --all-views`); `view` itself is one of them."""
    from zoo.entry_verdicts import with_bound_verdict, with_edge_verdict

    bundle = view.bundle
    views: dict[str, tuple[Any, Any, dict[str, Any]]] = {}
    for index, name in enumerate(bundle.view_names):
        task = view if name == view.case.id else bundle.task(index)
        view_result, validation = _one_view(result, task, device)
        views[name] = (task, with_bound_verdict(with_edge_verdict(view_result, validation), validation), validation)
    tasks = {name: _task_row(task, r, v) for name, (task, r, v) in views.items()}
    for task, _, validation in views.values():
        validation["tasks"] = {"bundle": bundle.name, "main": bundle.view_names[0], "views": tasks}
        validation["realism"]["battery_all_tasks"] = _battery_all_tasks(result, task, device)
    return views


def _one_view(result: Any, task: Any, device: Any) -> tuple[Any, dict[str, Any]]:
    """The result judged on `task`'s rows and circuit, and its validation.json (siit's validation and
    the patching checks, as a single-task entry gets them)."""
    from siit.metrics import meets_criterion
    from siit.train_checks import evaluate_trainee
    from siit.train_setup import Trainee, prepare
    from siit.validation import validate_model
    from zoo.entry_verdicts import with_patching_checks

    config = dataclasses.replace(result.config, distractors=False)  # the bundle's model has no distractors
    setup = prepare(task, config, result.arch, device=device)
    metrics = evaluate_trainee(Trainee(result.model, 0), setup, setup.final_evaluator)
    met = result.met_criterion and meets_criterion(metrics, config.judged_metrics, config.criterion,
                                                   config.distractor_r2, config.edge_criterion)
    view_result = dataclasses.replace(result, correspondence=setup.corr, evaluator=setup.final_evaluator,
                                      metrics=metrics, met_criterion=met, final_evaluation=None)  # not on this evaluator
    validation = with_patching_checks(validate_model(result.model, setup.final_evaluator, task), task, view_result)
    return view_result, validation


def _task_row(task: Any, result: Any, validation: dict[str, Any]) -> dict[str, Any]:
    m, bounds, edges = result.metrics, validation.get("effect_bounds") or {}, validation.get("edge_effects") or {}
    return {"circuit": list(result.correspondence.aligned), "met_criterion": result.met_criterion,
            "accuracy": m["accuracy"], "iia_min": m["iia_min"], "siia_min": m["siia_min"],
            "max_out_of_circuit_effect": validation["max_out_of_circuit_effect"],
            "effect_bounds_exact": bounds.get("exact"), "edges_exact": edges.get("exact"),
            "max_out_of_circuit_edge_effect": edges.get("max_out_of_circuit_edge_effect"),
            "edge_bounds_exact": (validation.get("edge_bounds") or {}).get("exact")}


def _battery_all_tasks(result: Any, view: Any, device: Any) -> dict[str, Any]:
    """The battery of looks with the view's circuit, on the bundle's validation inputs (every task)."""
    from eval.core.looks import battery
    from siit.look_inputs import look_inputs

    data = result.evaluator.data
    rows = data.shape_ids == 0 if data.shape_ids is not None else slice(None)
    circuit = view.graph.nodes  # fixed placement: high-level names are the components
    looks = look_inputs(result.model, data.tokens[rows], data.mask[rows], circuit, "classification",
                        data.label_mask[rows])
    return {**battery(looks), "inputs": "every task's validation inputs (padded)"}
