"""eval.scoring.stats: Vargha-Delaney A12 and the two-sided Wilcoxon-Mann-Whitney test of InterpBench RQ4."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.scoring.stats import MIN_ENTRIES, a12_matrix, compare_methods, holm, magnitude, pairwise_tests, vargha_delaney

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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=30))
def test_holm_adjusted_p_identities(ps):
    q = holm(ps)
    m = len(ps)
    assert all(p <= a <= 1.0 for p, a in zip(ps, q))  # never below the raw p, never above 1
    order = sorted(range(m), key=lambda i: ps[i])
    assert all(q[order[k]] <= q[order[k + 1]] for k in range(m - 1))  # monotone in the raw order
    assert q[order[0]] == min(1.0, m * ps[order[0]])  # the smallest is Bonferroni's
    # a test Holm rejects, Bonferroni's m*p may not; a test Bonferroni rejects, Holm rejects too
    assert all(a <= min(1.0, m * p) for p, a in zip(ps, q))


def test_holm_by_hand():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_a_star_needs_the_corrected_p_and_enough_entries():
    far = {"a": [0.9 + 0.01 * i for i in range(MIN_ENTRIES)], "b": [0.1 + 0.01 * i for i in range(MIN_ENTRIES)]}
    (t,) = pairwise_tests(far)
    assert t.comparison.p < 0.05 and t.p_holm < 0.05 and t.significant
    few = {k: v[: MIN_ENTRIES - 1] for k, v in far.items()}
    (t,) = pairwise_tests(few)
    assert t.comparison.p < 0.05 and not t.significant  # 4 against 4: p = 0.029, yet not enough entries
    many = {**far, **{f"c{i}": [0.5 + 0.01 * j for j in range(MIN_ENTRIES)] for i in range(8)}}
    tests = {(t.a, t.b): t for t in pairwise_tests(many)}
    assert tests[("a", "b")].p_holm == pytest.approx(min(1.0, len(tests) * tests[("a", "b")].comparison.p))
