"""A planted model's name -> its PlantedTask (the high-level model is rebuilt from the name, never
loaded from an entry), and the list of names."""

from __future__ import annotations

from planted.causal_bench import SCALES, causal_bench
from planted.causal_model import PlantedTask
from planted.ioi import ioi
from rasp_programs.case import CaseError


def planted_names() -> list[str]:
    """Every planted model: CAUSAL-BENCH's scales, smallest first, then IOI."""
    return [*SCALES, "ioi"]


def get_planted(name: str) -> PlantedTask:
    """The planted model `name`, or a one-line CaseError naming the known ones."""
    if name in SCALES:
        return causal_bench(name)
    if name == "ioi":
        return ioi()
    raise CaseError(f"unknown planted model {name!r}; known: {', '.join(planted_names())}")
