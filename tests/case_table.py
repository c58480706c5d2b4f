"""The shared table of built-in cases for parametrized tests.

Compiling is a few seconds per case, so the default suite checks the 16 main cases and a few
representative Appendix H cases (one per way of building them); every other catalogue case runs
under `-m slow` (`pytest -m slow tests/test_rasp_programs/test_compile_cases.py`), and tests/benchmarks/
bench_catalogue.py checks the whole catalogue in one process.
"""

from __future__ import annotations

import pytest

from rasp_programs.lookup import builtin_case_ids
from rasp_programs.catalogue import MAIN_CASE_IDS

REPRESENTATIVE = (
    "2",    # gather: length, source index, copy by attention (catalogue_util.gather_case)
    "15",   # SequenceMap of token and index
    "25",   # histogram and length combined by an MLP
    "50",   # real-valued Map with rounded outputs
    "113",  # five layers: descents counted, sequence reversed, chosen per input
)


def case_params() -> list:
    """Every built-in case id as a pytest param; all but the main and representative ones slow."""
    fast = set(MAIN_CASE_IDS) | set(REPRESENTATIVE)
    return [cid if cid in fast else pytest.param(cid, marks=pytest.mark.slow)
            for cid in builtin_case_ids()]
