"""An entry, a compiled case, a case or a case id -> the evaluator's `Target` (model, ground truth,
task sampler, reference model), and `evaluate` on it: the zoo's side of `eval.evaluate`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from eval.core.device import move_model, resolve_device
from eval.evaluator.evaluate import Target, evaluate as evaluate_target
from eval.evaluator.report import EvalReport
from zoo.high_level_source import reference_model

ModelChoice = Literal["auto", "trained", "compiled"]


def evaluate(target: Any, methods: Any = (), *, scores: str | Path | Sequence[str | Path] = (),
             model: ModelChoice = "auto", root: str | Path | None = None, device: str = "auto",
             **settings: Any) -> EvalReport:
    """`eval.evaluate` on an Entry, a CompiledCase, a Case or a case id (keyword settings as there),
    with the model on `device` (auto, cpu, cuda: eval.core.device)."""
    if not isinstance(target, Target):
        target = resolve_target(target, model, root, device=device)
    return evaluate_target(target, methods, scores=scores, **settings)


def resolve_target(target: Any, model: ModelChoice = "auto", root: str | Path | None = None, *,
                   device: str = "auto") -> Target:
    """A Target from an Entry, a CompiledCase, a Case or a case id (str / int), its model moved to
    `device` (eval.core.device.resolve_device; the reference model stays on the CPU, where the task's
    labels are made)."""
    target = _resolve(target, model, root)
    return dataclasses.replace(target, model=move_model(target.model, resolve_device(device)))


def _resolve(target: Any, model: ModelChoice, root: str | Path | None) -> Target:
    from rasp_programs.case import Case
    from rasp_programs.lookup import get_case
    from rasp_programs.compile import CompiledCase, compile_case
    from zoo.entry import Entry, load_entry_dir
    from zoo.paths import compiled_dir, entries_dir, zoo_root

    if model not in ("auto", "trained", "compiled"):
        raise ValueError(f"model must be trained, compiled or auto, not {model!r}")
    base = zoo_root(root)
    compile_ = lambda case: compile_case(case, compiled_dir(base))  # noqa: E731
    reference = lambda case: reference_model(case, compiled_dir(base))  # noqa: E731
    if isinstance(target, CompiledCase):
        if model == "trained":
            raise ValueError("a CompiledCase has no trained model; pass an Entry or a case id")
        return _compiled_target(target)
    if isinstance(target, Entry):
        if model == "compiled":
            return _compiled_target(compile_(_compilable(target.case)))
        return _trained_target(target, reference(target.case))
    case = target if isinstance(target, Case) else get_case(str(target))
    entry_dir = entries_dir(base) / case.entry_name
    if model == "trained" or (model == "auto" and entry_dir.is_dir()):
        if not entry_dir.is_dir():
            more = (f"train it with `zoo train planted {case.id}`" if case.family == "planted"
                    else "train it first or use --model compiled")
            raise ValueError(f"no trained entry {case.entry_name} under {entries_dir(base)}; {more}")
        # the user named the program: it, not the entry's data-only copy, labels the task
        return _trained_target(load_entry_dir(entry_dir), reference(case), case=case)
    return _compiled_target(compile_(_compilable(case)))


def _compilable(case: Any) -> Any:
    """`case` if it has a program to compile; a planted model has none (ValueError)."""
    if case.family == "planted":
        raise ValueError(f"planted model {case.id} has no compiled model; evaluate its trained entry "
                         f"(`zoo train planted {case.id}` first)")
    return case


def _compiled_target(compiled: Any) -> Target:
    return Target(name=compiled.case.entry_name, which="compiled", model=compiled.model,
                  truth=compiled.graph.promoted(), case=compiled.case, encoding=compiled.encoding,
                  reference=compiled.model)


def _trained_target(entry: Any, reference: Any, case: Any = None) -> Target:
    return Target(name=entry.name, which="trained", model=entry.model, truth=entry.circuit.promoted(),
                  case=entry.case if case is None else case, encoding=entry.encoding, reference=reference,
                  path=str(entry.path))
