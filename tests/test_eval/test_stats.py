"""eval.scoring.stats: Vargha-Delaney A12 and the two-sided Wilcoxon-Mann-Whitney test of InterpBench RQ4."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.scoring.stats import a12_matrix, compare_methods, magnitude, pairwise_tests, vargha_delaney

# AUROC-like values on a coarse grid, so that ties (common among AUROCs of 1.0) are drawn often
aurocs = st.lists(st.integers(0, 20).map(lambda k: k / 20), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(aurocs, aurocs)
def test_a12_is_complementary_and_equals_u_over_nm(x, y):
    assert vargha_delaney(x, y) + vargha_delaney(y, x) == pytest.approx(1.0)
    c = compare_methods(x, y)
    assert c.a12 == pytest.approx(c.u / (len(x) * len(y)))
    assert 0.0 <= c.p <= 1.0
    assert compare_methods(y, x).p == pytest.approx(c.p)  # two-sided: symmetric


def test_exact_p_without_ties_and_normal_approximation_with_ties():
    exact = compare_methods([0.1, 0.2, 0.3], [0.4, 0.5, 0.6])
    # the three smallest of six values all in one sample: 2 of C(6, 3) = 20 splits are as extreme
    assert exact.test == "exact" and exact.p == pytest.approx(0.1) and exact.a12 == 0.0
    tied = compare_methods([1.0, 1.0, 1.0, 0.9, 1.0, 1.0], [0.5, 0.6, 0.5, 0.7, 0.6, 0.8])
    assert tied.test == "asymptotic" and tied.a12 == 1.0 and tied.p < 0.01
    same = compare_methods([1.0, 1.0], [1.0, 1.0, 1.0])
    assert same.test == "degenerate" and same.p == 1.0 and same.a12 == 0.5


def test_pairwise_table_matrix_and_magnitudes():
    samples = {"acdc": [0.9, 0.8, 1.0], "eap": [0.5, 0.6, 0.55], "none": [], "sp": [0.9, 0.8, 1.0]}
    tests = pairwise_tests(samples)
    assert [(t.a, t.b) for t in tests] == [("acdc", "eap"), ("acdc", "sp"), ("eap", "sp")]
    m = a12_matrix(["acdc", "eap", "sp"], tests)
    assert m[0][1] == 1.0 and m[1][0] == 0.0 and m[0][2] == m[2][0] == 0.5 and m[0][0] is None
    assert [magnitude(v) for v in (0.5, 0.6, 0.68, 0.75, 0.25)] == ["negligible", "small", "medium", "large", "large"]
    with pytest.raises(ValueError):
        compare_methods([math.nan], [0.5])
