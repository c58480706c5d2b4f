"""The shipped catalogue.json (what `zoo list` shows without compiling) matches a fresh compile."""

from __future__ import annotations

import json

import pytest
from case_table import case_params

from rasp_programs.lookup import builtin_case_ids
from rasp_programs.catalogue import NOT_BUILT
from rasp_programs.summary import CATALOGUE_PATH, summary_row


def _shipped() -> dict:
    return json.loads(CATALOGUE_PATH.read_text())


def test_catalogue_lists_every_case_and_every_case_not_built():
    data = _shipped()
    assert [row["id"] for row in data["cases"]] == builtin_case_ids()
    assert data["not_built"] == [{"id": cid, "reason": why} for cid, why in NOT_BUILT.items()]


@pytest.mark.parametrize("case_id", case_params())
def test_catalogue_matches_compiled_models(case_id, compiled):
    shipped = {row["id"]: row for row in _shipped()["cases"]}
    assert shipped[case_id] == summary_row(compiled(case_id)), (
        f"catalogue.json is stale for case {case_id}: run `python -m rasp_programs.summary`"
    )
