"""A planted model's name -> its PlantedTask (the high-level model is rebuilt from the name, never
loaded from an entry), the list of names, and the failure-mode families."""

from __future__ import annotations

from planted.bundles import BUNDLES
from planted.case_bundles import MAIN_CASES, PREFIX, case_bundle
from planted.causal_bench import SCALES, causal_bench
from planted.causal_model import PlantedTask
from planted.failure_modes import FAMILIES, PLANTED
from planted.ioi import ioi
from rasp_programs.case import CaseError


def planted_names() -> list[str]:
    """Every planted model: CAUSAL-BENCH's scales, smallest first, then IOI, then the failure-mode models,
    then each multi-task bundle's views (`<bundle>.<task>`, main task first), the case bundles' last."""
    return [*SCALES, "ioi", *PLANTED, *(v for name in bundle_names() for v in get_bundle(name).view_names)]


def bundle_names() -> list[str]:
    """The multi-task bundles: the planted ones (planted.bundles), then one around each main case
    (planted.case_bundles, `mt-case-<id>`)."""
    return [*BUNDLES, *(f"{PREFIX}{cid}" for cid in MAIN_CASES)]


def get_bundle(name: str):
    """The multi-task bundle `name` (planted.multi_task.Bundle or planted.case_bundles.CaseBundle), or None."""
    if name in BUNDLES:
        return BUNDLES[name]()
    if name.startswith(PREFIX) and name[len(PREFIX):] in MAIN_CASES:
        return case_bundle(name[len(PREFIX):])
    return None


def get_planted(name: str) -> PlantedTask:
    """The planted model `name`, or a one-line CaseError naming the known ones."""
    if name in SCALES:
        return causal_bench(name)
    if name == "ioi":
        return ioi()
    if name in PLANTED:
        return PLANTED[name]()
    bundle = get_bundle(name.partition(".")[0])
    if bundle is not None and name in bundle.view_names:
        return bundle.task(bundle.view_names.index(name))
    known = [*SCALES, "ioi", *PLANTED, *(f"{b}.<task>" for b in bundle_names())]
    raise CaseError(f"unknown planted model {name!r}; known: {', '.join(known)} (`zoo list planted` names every task)")


def bundle_views(name: str) -> list[str] | None:
    """The views of the multi-task bundle `name` (e.g. mt-2x4), main task first; None if `name` is no bundle."""
    bundle = get_bundle(name)
    return None if bundle is None else list(bundle.view_names)


def family_members(family: str) -> list[str]:
    """The planted models of a failure-mode family (`all`: of every family), or a one-line CaseError."""
    if family == "all":
        return [m for f in FAMILIES.values() for m in f["models"]]
    if family not in FAMILIES:
        raise CaseError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}, all")
    return list(FAMILIES[family]["models"])
