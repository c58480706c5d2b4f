"""Corruption styles (eval.core.corruption): what a method's counterfactuals are."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.corruption import (CorruptionError, check_corruption, counterfactual_inputs,
                                      parse_corruption)
from planted.causal_model import NoProgram
from rasp_programs.case import Case, uniform_sampler


def _case(min_len: int = 3, max_len: int = 6, vocab: tuple = (0, 1, 2, 3, 4), **kw) -> Case:
    return Case(id="toy", name="toy", description="toy", task_kind="classification", vocab=vocab,
                max_seq_len=max_len, min_seq_len=min_len, build_program=NoProgram("toy"), **kw)


@pytest.mark.parametrize("spec,position", [("resample", None), ("token:1", 1), ("token:3", 3), ("token:-1", -1)])
def test_styles_parse(spec, position):
    assert parse_corruption(spec).position == position
    assert parse_corruption(spec).describe()


@pytest.mark.parametrize("spec", ["", "token", "token:0", "token:x", "token:1.5", "tokens:1", "Resample", "token:+1"])
def test_malformed_styles_are_one_line_errors(spec):
    with pytest.raises(CorruptionError) as exc:
        parse_corruption(spec)
    assert "\n" not in str(exc.value)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.sampled_from([1, 2, 3, -1, -2, -3]), n=st.integers(1, 40))
def test_a_token_corruption_changes_that_token_and_nothing_else(seed, k, n):
    case = _case()
    clean = case.sample(n, seed)
    cf = counterfactual_inputs(case, clean, seed, f"token:{k}")
    for a, b in zip(clean, cf, strict=True):
        assert len(a) == len(b)
        at = k - 1 if k > 0 else len(a) + k
        assert [i for i in range(len(a)) if a[i] != b[i]] == [at]
        assert b[at] in case.vocab
    assert cf == counterfactual_inputs(case, clean, seed, f"token:{k}")  # reproducible from the seed


def test_resample_is_the_independent_draw_it_always_was():
    case = _case()
    clean = case.sample(20, 4)
    assert counterfactual_inputs(case, clean, 4) == case.sample(20, 4 + 1_000_003)


def test_a_token_corruption_refuses_what_could_leave_the_cases_domain():
    with pytest.raises(CorruptionError, match="at most 3"):
        check_corruption(_case(), "token:4")
    with pytest.raises(CorruptionError, match="at most 3"):
        check_corruption(_case(), "token:-4")
    with pytest.raises(CorruptionError, match="own sampler"):
        check_corruption(_case(sampler=uniform_sampler((0, 1), 3, 6)), "token:1")
    with pytest.raises(CorruptionError, match="one token value"):
        check_corruption(_case(vocab=(0,)), "token:1")
    assert check_corruption(_case(sampler=uniform_sampler((0, 1), 3, 6)), "resample").position is None


def test_make_task_records_its_corruption_and_keeps_the_clean_draw():
    import torch

    from eval.patching.task import make_task
    from planted import get_planted

    task = get_planted("distribution-shift")
    kw = dict(case=task.case, encoding=task.encoding, reference=task.high_level(), n=64, seed=3)
    shifted, resampled = make_task(**kw, corruption="token:1"), make_task(**kw)
    assert (shifted.corruption, resampled.corruption) == ("token:1", "resample")
    assert torch.equal(shifted.tokens, resampled.tokens)
    differ = shifted.tokens != shifted.cf_tokens
    assert differ[:, 1].all() and not differ[:, 2:].any()  # BOS at 0, x_1 at 1
    # the family's two heads never read x_1: the labels change at position 1 alone
    changed = (shifted.labels != shifted.cf_labels) & shifted.positions
    assert changed[:, 1].all() and not changed[:, 2:].any()


def test_a_case_keeps_its_corruption_in_its_metadata_only_when_it_has_one():
    assert "corruption" not in _case().metadata()
    assert dataclasses.replace(_case(), corruption="token:1").metadata()["corruption"] == "token:1"


def test_a_case_refuses_a_corruption_it_cannot_take():
    from rasp_programs.case import CaseError

    with pytest.raises(CaseError, match="at most 3"):
        _case(corruption="token:4")
    with pytest.raises(CaseError, match="unknown corruption"):
        _case(corruption="shuffle")
    assert _case(corruption="token:-3").corruption == "token:-3"
