"""eval.core.proportion_bound: the one-sided Clopper-Pearson upper bound of validation.json's
`effect_bounds` and `edge_effects`. Properties (hypothesis) and known values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.proportion_bound import binomial_cdf, upper_bound

counts = st.integers(min_value=1, max_value=2000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n)))
confidences = st.floats(min_value=0.5, max_value=0.999)


@settings(max_examples=200, deadline=None)
@given(counts, confidences)
def test_the_bound_has_the_binomial_tail_it_promises(kn, confidence):
    k, n = kn
    u = upper_bound(k, n, confidence)
    assert k / n <= u <= 1.0
    if k < n:
        assert abs(binomial_cdf(k, n, u) - (1 - confidence)) < 1e-9


@settings(max_examples=200, deadline=None)
@given(counts, confidences)
def test_monotone_in_k_and_n(kn, confidence):
    k, n = kn
    u = upper_bound(k, n, confidence)
    if k < n:
        assert upper_bound(k + 1, n, confidence) > u  # more changes seen: a larger bound
    assert upper_bound(k, n + 1, confidence) < u  # more units, as many changes: a smaller bound


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**6), confidences)
def test_no_change_has_the_closed_form(n, confidence):
    # the plain formula loses digits to cancellation for large n; the module computes it without
    assert math.isclose(upper_bound(0, n, confidence), 1 - (1 - confidence) ** (1 / n), rel_tol=1e-9)


def test_known_values():
    # 300 sequences, none changed: below 0.01 (BOUND_N); one changed: not any more
    assert 0.0099 < upper_bound(0, 300) < 0.01 < upper_bound(1, 300)
    assert upper_bound(3, 3) == 1.0
    assert abs(upper_bound(5, 1000) - 0.0104841) < 1e-6  # scipy.stats.beta.ppf(0.95, 6, 995)
    scipy_stats = pytest.importorskip("scipy.stats")
    for k, n in [(1, 10), (7, 300), (150, 300), (299, 300)]:
        assert math.isclose(upper_bound(k, n), scipy_stats.beta.ppf(0.95, k + 1, n - k), rel_tol=1e-9)


@pytest.mark.parametrize("k, n, confidence", [(-1, 5, 0.95), (6, 5, 0.95), (0, 0, 0.95), (1, 5, 1.0), (1, 5, 0.0)])
def test_bad_input_is_refused(k, n, confidence):
    with pytest.raises(ValueError):
        upper_bound(k, n, confidence)
