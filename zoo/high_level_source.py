"""A Case -> the high-level model behind it: the Tracr compilation of a RASP case (cached under
the zoo root), or the planted model rebuilt from its name (package `planted`; an entry never
supplies code). What training, validation, the pull check and the evaluator's labels use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.errors import ZooError


def is_planted(case: Any) -> bool:
    return getattr(case, "family", "case") == "planted"


def resolve_case(kind: str, case_id: str):
    """The Case named by a kind (`case` or `planted`) and an id, or a one-line ZooError."""
    if kind == "planted":
        return planted_task(case_id).case
    from rasp_programs.case import CaseError
    from rasp_programs.lookup import get_case

    try:
        return get_case(case_id)
    except CaseError as exc:
        raise ZooError(str(exc)) from None


def planted_task(name: str) -> Any:
    """The PlantedTask `name`, or a one-line ZooError naming the known ones."""
    from planted import get_planted
    from rasp_programs.case import CaseError

    try:
        return get_planted(name)
    except CaseError as exc:
        raise ZooError(str(exc)) from None


def high_level_task(case: Any, compile_cache: Path | None) -> Any:
    """What siit.train takes for `case`: its CompiledCase, or its PlantedTask."""
    if is_planted(case):
        return planted_task(case.id)
    from rasp_programs.compile import compile_case
    from zoo.paths import compile_cache_dir

    return compile_case(case, compile_cache, shared_cache=compile_cache_dir())


def reference_model(case: Any, compile_cache: Path | None) -> Any:
    """The model whose outputs are the task's labels: the compiled HookedTransformer, or the
    planted causal model (eval.patching.task.reference_outputs reads either)."""
    task = high_level_task(case, compile_cache)
    return task.model
