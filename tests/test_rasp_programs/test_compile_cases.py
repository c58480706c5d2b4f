"""Every built-in case: the compiled HookedTransformer computes exactly what RASP's interpreter does.

Tracr can compile a wrong model silently (REFERENCE.md), so each case is checked on at least 200
random inputs of varying length drawn by hypothesis, plus the conversion is checked against
Tracr's own haiku forward pass.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from case_table import case_params
from rasp_programs.lookup import builtin_case_ids, get_case
from rasp_programs.catalogue import APPENDIX_H_IDS, MAIN_CASE_IDS, NOT_BUILT

CASE_IDS = builtin_case_ids()
REGRESSION_ATOL = 1e-4


def inputs_for(case):
    """Hypothesis strategy over valid inputs of the case: any length in range, any tokens."""
    return st.lists(st.sampled_from(case.vocab), min_size=case.min_seq_len, max_size=case.max_seq_len)


def outputs_equal(case, got, expected) -> bool:
    if len(got) != len(expected):
        return False
    if case.task_kind == "regression":
        return all(math.isclose(g, e, abs_tol=REGRESSION_ATOL) for g, e in zip(got, expected))
    return list(got) == list(expected)


def test_all_sixteen_main_cases_are_registered():
    assert list(MAIN_CASE_IDS) == ["3", "4", "8", "11", "13", "18", "19", "20", "21", "26", "29", "33",
                                   "34", "35", "36", "37"]
    assert set(MAIN_CASE_IDS) <= set(CASE_IDS)


def test_every_appendix_h_case_is_built_or_listed_with_a_reason():
    assert len(APPENDIX_H_IDS) == 69, "Table 11 describes 69 cases"
    for case_id in APPENDIX_H_IDS:
        assert (case_id in CASE_IDS) != (case_id in NOT_BUILT), case_id
    assert all(NOT_BUILT.values()), "a case not built says why"
    assert set(CASE_IDS) == set(MAIN_CASE_IDS) | set(APPENDIX_H_IDS) - set(NOT_BUILT)


@pytest.mark.parametrize("case_id", case_params())
def test_compiled_model_equals_rasp_evaluate(case_id, compiled):
    compiled_case = compiled(case_id)
    case = compiled_case.case
    program = case.program  # built once: evaluation per example stays cheap
    from tracr.rasp import rasp

    @settings(max_examples=200, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(inputs_for(case))
    def check(seq):
        expected = rasp.evaluate(program, seq)
        got = compiled_case.run([tuple(seq)])[0]
        assert outputs_equal(case, got, expected), f"case {case_id} on {seq}: model {got} != RASP {expected}"

    check()


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_sampler_draws_valid_varied_inputs(case_id):
    case = get_case(case_id)
    seqs = case.sample(200, seed=3)
    assert len(seqs) == 200
    assert all(case.min_seq_len <= len(s) <= case.max_seq_len for s in seqs)
    assert all(t in case.vocab for s in seqs for t in s)
    assert seqs == case.sample(200, seed=3), "same seed must give the same inputs"
    if case.min_seq_len < case.max_seq_len:
        assert len({len(s) for s in seqs}) > 1, "lengths should vary"


@pytest.mark.parametrize("case_id", ["3", "4", "13", "19"])
def test_conversion_matches_tracr_forward(case_id, compiled):
    """The HookedTransformer's logits equal Tracr's own (haiku) model on the output directions."""
    import numpy as np
    import torch

    from rasp_programs.compile import _compile_with_tracr

    compiled_case = compiled(case_id)
    case = compiled_case.case
    assembled, _, labels, columns = _compile_with_tracr(case)
    for seq in case.sample(4, seed=11):
        out = assembled.apply(["BOS", *seq])
        tracr_residual = np.asarray(out.transformer_output)[0]  # [T, d_model]
        tokens, mask = compiled_case.encoding.encode([seq])
        with torch.no_grad():
            logits = compiled_case.model(tokens, attention_mask=mask)[0, : len(seq) + 1]
        expected = tracr_residual[:, columns]
        assert np.allclose(logits.numpy(), expected, atol=1e-4), (case_id, seq)
