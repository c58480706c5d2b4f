"""The Case record and the registry: invariants, lookups, outside cases, the compile cache."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from rasp_programs.case import Case, CaseError
from rasp_programs.lookup import get_case
from rasp_programs.compile import case_fingerprint, compile_case

TESTS = str(Path(__file__).parents[1])  # tests/: outside_case


def _case(**overrides) -> Case:
    fields = dict(
        id="x", name="x", description="x", task_kind="classification", vocab=("a", "b"),
        max_seq_len=3, build_program=lambda: None,
    )
    fields.update(overrides)
    return Case(**fields)


@pytest.mark.parametrize(
    "overrides",
    [
        {"task_kind": "ranking"},
        {"vocab": ()},
        {"vocab": ("a", "a")},
        {"vocab": ("a", "BOS")},
        {"min_seq_len": 0},
        {"min_seq_len": 4},
    ],
)
def test_malformed_cases_are_rejected(overrides):
    with pytest.raises(CaseError):
        _case(**overrides)


def test_unknown_case_names_the_known_ones():
    with pytest.raises(CaseError, match="known cases: 3, 4, 8"):
        get_case("999")


def test_outside_case_is_loaded_by_module_and_function(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    case = get_case("outside_case:make_case")
    assert case.id == "outside_case:make_case" and case.entry_name == "case-outside_case-make_case"
    with pytest.raises(CaseError, match="not a Case"):
        get_case("outside_case:not_a_case")
    with pytest.raises(CaseError, match="no function"):
        get_case("outside_case:missing")
    with pytest.raises(CaseError, match="cannot import"):
        get_case("no_such_module_xyz:make_case")


def test_second_compile_comes_from_the_cache_and_is_identical(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    case = get_case("outside_case:make_case")
    first = compile_case(case, tmp_path)
    second = compile_case(case, tmp_path)
    assert not first.from_cache and second.from_cache
    assert second.graph == first.graph and second.encoding == first.encoding
    for key, tensor in first.state_dict.items():
        assert (second.state_dict[key] == tensor).all(), key
    assert not list(tmp_path.glob(".case-*")), "no temporary directories are left behind"


def test_fingerprint_changes_when_the_case_changes():
    case = get_case("33")
    assert case_fingerprint(case) == case_fingerprint(get_case("33"))
    assert case_fingerprint(dataclasses.replace(case, max_seq_len=4)) != case_fingerprint(case)
    longer = dataclasses.replace(case, vocab=case.vocab + ("seven77",))
    assert case_fingerprint(longer) != case_fingerprint(case)


def test_listing_imports_neither_jax_nor_torch():
    import subprocess

    code = (
        "import sys; from zoo.cli import main; main(['list']);"
        "bad = [m for m in ('jax', 'torch', 'tracr', 'transformer_lens') if m in sys.modules];"
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "33" in result.stdout
