"""Weight-histogram KL divergence (eval.scoring.weight_histograms, InterpBench Table 5): checked against
hand-made weight sets whose histograms and KL are known in closed form, and against identities."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from eval.scoring.weight_histograms import (HistogramSpec, bin_counts, kl_divergence, kl_table, pooled_weights,
                                    shared_edges, state_dict_kl_table)

EDGES = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
CENTRES = np.array([-1.5, -0.5, 0.5, 1.5])


def _state_dict(values: np.ndarray) -> dict[str, torch.Tensor]:
    """A TL-style state dict whose pooled matrices hold exactly `values` (split over two matrices),
    with a bias and embeddings that would move the histogram if they were pooled."""
    half = len(values) // 2
    return {
        "embed.W_E": torch.full((3, 2), 50.0),
        "blocks.0.attn.W_Q": torch.tensor(values[:half], dtype=torch.float32).reshape(1, 1, -1),
        "blocks.0.attn.b_Q": torch.full((1, 2), 1000.0),
        "blocks.0.mlp.W_out": torch.tensor(values[half:], dtype=torch.float32).reshape(1, -1),
        "unembed.W_U": torch.full((2, 2), -70.0),
    }


def test_kl_of_hand_made_weight_sets_matches_the_closed_form() -> None:
    # P has bin masses (1, 3, 3, 1) / 8 and Q (3, 1, 1, 3) / 8; both sets have mean 0, so centring
    # moves nothing: KL(P || Q) = 2 (1/8) ln(1/3) + 2 (3/8) ln 3 = ln(3) / 2, and the same reversed
    p = np.repeat(CENTRES, [1, 3, 3, 1])
    q = np.repeat(CENTRES, [3, 1, 1, 3])
    table = kl_table({"p": pooled_weights(_state_dict(p)), "q": pooled_weights(_state_dict(q))},
                     HistogramSpec(bins=4, floor=0.0), edges=EDGES)
    assert table.counts["p"].tolist() == [1, 3, 3, 1] and table.counts["q"].tolist() == [3, 1, 1, 3]
    assert table.kl("p", "q") == pytest.approx(math.log(3) / 2, abs=1e-12)
    assert table.kl("q", "p") == pytest.approx(math.log(3) / 2, abs=1e-12)
    assert table.lower_triangle() == [[0.0, None], [pytest.approx(math.log(3) / 2), 0.0]]


def test_asymmetric_sets_with_known_masses() -> None:
    # P: masses (1/2, 1/4, 1/4, 0); Q: (1/4, 1/4, 1/4, 1/4), no centring:
    # KL(P || Q) = 1/2 ln 2 + 0 + 0 = ln(2) / 2; KL(Q || P) = inf without a floor
    p = np.repeat(CENTRES, [2, 1, 1, 0])
    q = np.repeat(CENTRES, [1, 1, 1, 1])
    spec = HistogramSpec(bins=4, floor=0.0, centre=False)
    table = kl_table({"p": p, "q": q}, spec, edges=EDGES)
    assert table.kl("p", "q") == pytest.approx(math.log(2) / 2, abs=1e-12)
    assert table.kl("q", "p") == math.inf


def test_floor_gives_the_closed_form_for_disjoint_spikes() -> None:
    # All of P in bin 0 and all of Q in bin 3; with floor e every share is (c/N + e) / (1 + 4e):
    # KL(P || Q) = ln((1 + e) / e) / (1 + 4e) (the two middle bins cancel)
    eps = 1e-6
    p, q = np.full(4, -1.5), np.full(7, 1.5)
    table = kl_table({"p": p, "q": q}, HistogramSpec(bins=4, floor=eps, centre=False), edges=EDGES)
    expected = math.log((1 + eps) / eps) / (1 + 4 * eps)
    assert table.kl("p", "q") == pytest.approx(expected, rel=1e-12)
    assert table.kl("q", "p") == pytest.approx(expected, rel=1e-12)
    assert np.allclose(table.masses["p"], np.array([1 + eps, eps, eps, eps]) / (1 + 4 * eps))


def test_bins_are_half_open_and_tails_land_in_the_end_bins() -> None:
    counts = bin_counts(np.array([-9.0, -2.0, -1.0, -0.5, 0.0, 2.0, 30.0]), EDGES)
    assert counts.tolist() == [2, 2, 1, 2]  # -1.0 opens bin 1, 0.0 opens bin 2, 2.0 closes the last


def test_sparse_compiled_weights_do_not_stretch_the_shared_range() -> None:
    """Tracr models hold a few weights of 100 among exact zeros; the fences of the trained model,
    not those outliers, set the bins, so the trained histogram keeps its shape."""
    rng = np.random.default_rng(0)
    trained = rng.normal(0.0, 0.3, 5000)
    tracr = np.zeros(840)
    tracr[:16] = 100.0
    edges = shared_edges([trained - trained.mean(), tracr - tracr.mean()], bins=100, fence=3.0)
    assert -3.0 < edges[0] < -1.0 and 1.0 < edges[-1] < 3.0
    table = kl_table({"natural": trained, "tracr": tracr, "siit": rng.normal(0.0, 0.3, 5000)})
    assert table.kl("natural", "siit") < 0.1 < 5.0 < table.kl("natural", "tracr")


def test_state_dict_table_pools_only_block_matrices() -> None:
    a = _state_dict(np.repeat(CENTRES, [1, 3, 3, 1]))
    b = {**a, "embed.W_E": torch.full((3, 2), -50.0), "blocks.0.attn.b_Q": torch.zeros(1, 2)}
    table = state_dict_kl_table({"a": a, "b": b})
    assert table.n_weights == {"a": 8, "b": 8}
    assert table.kl("a", "b") == 0.0
    with pytest.raises(ValueError, match="no block matrices"):
        pooled_weights({"embed.W_E": torch.zeros(2, 2)})


def test_spec_rejects_bad_settings() -> None:
    for kw in ({"bins": 0}, {"fence": -1.0}, {"floor": 1.0}, {"floor": float("nan")}):
        with pytest.raises(ValueError):
            HistogramSpec(**kw)


# integers, power-of-two sizes and integer shifts: every mean and centred value is exact, so a
# weight on a bin edge cannot flip bins between the shifted and unshifted set
weights = st.integers(1, 7).flatmap(
    lambda k: arrays(np.float64, 2**k, elements=st.integers(-50, 50).map(float)))


@settings(max_examples=60, deadline=None)
@given(a=weights, b=weights, shift=st.integers(-20, 20))
def test_identities(a: np.ndarray, b: np.ndarray, shift: int) -> None:
    table = kl_table({"a": a, "b": b, "a_again": a.copy()}, HistogramSpec(bins=20))
    assert np.all(np.diag(table.matrix) == 0.0)  # KL(P, P) = 0
    assert table.kl("a", "a_again") == 0.0
    assert np.all(table.matrix >= -1e-12)  # KL is never negative
    for k in table.labels:
        assert table.masses[k].sum() == pytest.approx(1.0) and np.all(table.masses[k] > 0)
    lower = table.lower_triangle()
    assert lower[1][0] == table.kl("a", "b") and lower[0][1] is None
    # centring: moving one model's weights by a constant changes nothing
    moved = kl_table({"a": a + shift, "b": b, "a_again": a.copy()}, HistogramSpec(bins=20))
    assert np.array_equal(moved.matrix, table.matrix)


@settings(max_examples=40, deadline=None)
@given(p=arrays(np.float64, 6, elements=st.floats(0.01, 1.0)), q=arrays(np.float64, 6, elements=st.floats(0.01, 1.0)))
def test_kl_of_distributions_is_gibbs(p: np.ndarray, q: np.ndarray) -> None:
    p, q = p / p.sum(), q / q.sum()
    value = kl_divergence(p, q)
    assert value >= -1e-12  # Gibbs' inequality
    if np.abs(p - q).max() > 1e-3:
        assert value > 0  # zero only when P = Q
    assert value == pytest.approx(float(np.sum(p * np.log(p / q))))
