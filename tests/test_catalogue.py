"""The shipped catalogue.json (what `zoo list` shows without compiling) matches a fresh compile."""

from __future__ import annotations

import json

from rasp_programs.case import builtin_case_ids
from rasp_programs.summary import CATALOGUE_PATH, summary_row


def test_catalogue_matches_compiled_models(compiled):
    shipped = {row["id"]: row for row in json.loads(CATALOGUE_PATH.read_text())["cases"]}
    assert list(shipped) == builtin_case_ids()
    for case_id in builtin_case_ids():
        assert shipped[case_id] == summary_row(compiled(case_id)), (
            f"catalogue.json is stale for case {case_id}: run `python -m rasp_programs.summary`"
        )
