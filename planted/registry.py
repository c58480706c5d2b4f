"""A planted model's name -> its PlantedTask (the high-level model is rebuilt from the name, never
loaded from an entry), the list of names, and the failure-mode families."""

from __future__ import annotations

from planted.bundles import BUNDLES
from planted.causal_bench import SCALES, causal_bench
from planted.causal_model import PlantedTask
from planted.failure_modes import FAMILIES, PLANTED
from planted.ioi import ioi
from rasp_programs.case import CaseError


def planted_names() -> list[str]:
    """Every planted model: CAUSAL-BENCH's scales, smallest first, then IOI, then the failure-mode models,
    then each multi-task bundle's views (`<bundle>.<task>`, main task first)."""
    return [*SCALES, "ioi", *PLANTED, *(v for build in BUNDLES.values() for v in build().view_names)]


def get_planted(name: str) -> PlantedTask:
    """The planted model `name`, or a one-line CaseError naming the known ones."""
    if name in SCALES:
        return causal_bench(name)
    if name == "ioi":
        return ioi()
    if name in PLANTED:
        return PLANTED[name]()
    bundle_name, _, key = name.partition(".")
    if bundle_name in BUNDLES:
        bundle = BUNDLES[bundle_name]()
        if name in bundle.view_names:
            return bundle.task(bundle.view_names.index(name))
    raise CaseError(f"unknown planted model {name!r}; known: {', '.join(planted_names())}")


def bundle_views(name: str) -> list[str] | None:
    """The views of the multi-task bundle `name` (e.g. mt-2x4), main task first; None if `name` is no bundle."""
    return list(BUNDLES[name]().view_names) if name in BUNDLES else None


def family_members(family: str) -> list[str]:
    """The planted models of a failure-mode family (`all`: of every family), or a one-line CaseError."""
    if family == "all":
        return [m for f in FAMILIES.values() for m in f["models"]]
    if family not in FAMILIES:
        raise CaseError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}, all")
    return list(FAMILIES[family]["models"])
