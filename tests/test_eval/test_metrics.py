"""Metric identities of eval.core.metrics and the graph formulas of eval.core.graph (no model needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.graph import ComputationGraph, mib_edge_count, promote_scores
from eval.core.metrics import (convergence, jaccard, mean_pairwise_jaccard, pessimistic_auroc, prf, roc, top_k,
                          weighted_harmonic)
from eval.scoring.stats import compare_methods, vargha_delaney

labelled = st.lists(st.tuples(st.floats(-1e6, 1e6, allow_nan=False), st.booleans()), min_size=2, max_size=40).filter(
    lambda xs: any(b for _, b in xs) and not all(b for _, b in xs))


def _split(data):
    scores = {f"n{i}": v for i, (v, _) in enumerate(data)}
    truth = {f"n{i}" for i, (_, b) in enumerate(data) if b}
    return scores, truth


@given(labelled)
def test_auroc_equals_mann_whitney_u_for_untied_scores(data):
    values = [v for v, _ in data]
    if len(set(values)) != len(values):
        return
    scores, truth = _split(data)
    pos = [scores[n] for n in truth]
    neg = [v for n, v in scores.items() if n not in truth]
    u = sum(1 for p in pos for q in neg if p > q)
    assert roc(scores, truth).auroc == pytest.approx(u / (len(pos) * len(neg)), abs=1e-12)


@given(labelled)
def test_auroc_with_ties_counts_half(data):
    scores, truth = _split(data)
    pos = [scores[n] for n in truth]
    neg = [v for n, v in scores.items() if n not in truth]
    u = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    assert roc(scores, truth).auroc == pytest.approx(u / (len(pos) * len(neg)), abs=1e-12)


@given(labelled, st.sampled_from(["affine", "cube", "exp"]))
def test_auroc_invariant_to_strictly_increasing_transforms(data, kind):
    scores, truth = _split(data)
    f = {"affine": lambda v: 3 * v + 7, "cube": lambda v: v**3, "exp": lambda v: math.exp(v / 1e6)}[kind]
    transformed = {n: f(v) for n, v in scores.items()}
    names = sorted(scores)
    same_order = all(
        (scores[a] < scores[b]) == (transformed[a] < transformed[b])
        and (scores[a] == scores[b]) == (transformed[a] == transformed[b])
        for a in names for b in names
    )
    if same_order:  # float rounding can merge two close values; the identity is about exact transforms
        assert roc(transformed, truth).auroc == pytest.approx(roc(scores, truth).auroc, abs=1e-12)


@given(st.integers(1, 20), st.integers(1, 20))
def test_perfect_scorer_is_one_and_reverse_zero(n_pos, n_neg):
    truth = {f"p{i}" for i in range(n_pos)}
    scores = {**{f"p{i}": 1.0 + i for i in range(n_pos)}, **{f"q{i}": -1.0 - i for i in range(n_neg)}}
    assert roc(scores, truth).auroc == 1.0
    assert roc({n: -v for n, v in scores.items()}, truth).auroc == 0.0
    curve = roc(scores, truth)
    assert (curve.fpr[0], curve.tpr[0], curve.fpr[-1], curve.tpr[-1]) == (0.0, 0.0, 1.0, 1.0)


def test_roc_rejects_non_finite_scores():
    with pytest.raises(ValueError, match="finite"):
        roc({"a": float("nan"), "b": 1.0}, {"a"})


@given(st.sets(st.integers(0, 30)), st.sets(st.integers(0, 30)))
def test_prf_matches_definition(pred, true):
    r = prf({str(x) for x in pred}, {str(x) for x in true})
    tp = len(pred & true)
    p = tp / len(pred) if pred else 0.0
    rec = tp / len(true) if true else 0.0
    assert r.precision == pytest.approx(p) and r.recall == pytest.approx(rec)
    assert r.f1 == pytest.approx(2 * p * rec / (p + rec) if p + rec else 0.0)
    if p + rec:
        assert r.f1 == pytest.approx(2 * tp / (len(pred) + len(true)))


@given(st.sets(st.integers(0, 20)), st.sets(st.integers(0, 20)), st.sets(st.integers(0, 20)))
def test_jaccard_properties(a, b, c):
    assert jaccard(a, b) == jaccard(b, a)
    assert 0.0 <= jaccard(a, b) <= 1.0
    assert jaccard(a, a) == 1.0
    assert (jaccard(a, b) == 1.0) == (a == b)
    if a and not (a & b):
        assert jaccard(a, b) == 0.0
    # 1 - Jaccard is a metric: triangle inequality
    assert (1 - jaccard(a, c)) <= (1 - jaccard(a, b)) + (1 - jaccard(b, c)) + 1e-12
    assert mean_pairwise_jaccard([a, b, c]) == pytest.approx((jaccard(a, b) + jaccard(a, c) + jaccard(b, c)) / 3)


def test_permutation_p_small_for_identical_sets():
    universe = [f"c{i}" for i in range(20)]
    same = {"c1", "c5", "c9"}
    result = convergence({"x": same, "y": same, "z": same}, universe, permutations=500, seed=1)
    assert result.observed == 1.0
    assert result.p < 0.01 and result.z > 3
    assert set(result.consensus) == same == set(result.majority)
    assert result.matrix[0][1] == 1.0


def test_permutation_p_of_random_sets_is_roughly_uniform():
    rng = np.random.default_rng(0)
    universe = [f"c{i}" for i in range(15)]
    ps = []
    for _ in range(60):
        sets = {k: set(rng.choice(universe, size=5, replace=False)) for k in "abc"}
        ps.append(convergence(sets, universe, permutations=200, seed=int(rng.integers(1 << 30))).p)
    ps = np.array(ps)
    assert 0.35 < ps.mean() < 0.7  # uniform has mean 0.5 (discrete null pushes it slightly up)
    assert (ps < 0.05).mean() < 0.15
    assert (ps > 0.5).mean() > 0.3


def test_consensus_and_majority():
    r = convergence({"a": {"x", "y"}, "b": {"x", "z"}, "c": {"x", "y", "w"}}, "wxyzv", permutations=20)
    assert r.consensus == ("x",) and r.majority == ("x", "y")


def test_pessimistic_auroc_staircase():
    assert pessimistic_auroc([]).auroc == 0.0  # only (0,0) and (1,1): the staircase stays at 0
    assert pessimistic_auroc([(0.0, 1.0)]).auroc == 1.0
    assert pessimistic_auroc([(0.0, 0.5), (0.5, 1.0)]).auroc == pytest.approx(0.75)
    # a dominated point adds nothing
    assert pessimistic_auroc([(0.0, 0.5), (0.2, 0.4)]).auroc == pytest.approx(0.5)


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), max_size=10))
def test_pessimistic_auroc_is_below_trapezoid_of_its_points(points):
    pess = pessimistic_auroc(points).auroc
    assert 0.0 <= pess <= 1.0 + 1e-12
    pts = sorted(set(points) | {(0.0, 0.0), (1.0, 1.0)})
    best, hull = [], 0.0
    for f, t in pts:
        hull = max(hull, t)
        best.append((f, hull))
    trap = sum((f1 - f0) * (t0 + t1) / 2 for (f0, t0), (f1, t1) in zip(best, best[1:]))
    assert pess <= trap + 1e-9


def test_vargha_delaney_and_wmw():
    assert vargha_delaney([1, 2, 3], [0, 0, 0]) == 1.0
    assert vargha_delaney([1, 1], [1, 1]) == 0.5
    result = compare_methods([0.9, 0.95, 0.92, 0.97, 0.99, 0.93], [0.5, 0.55, 0.4, 0.6, 0.45, 0.52])
    assert result.a12 == 1.0 and result.p < 0.01
    same = compare_methods([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert same.a12 == 0.5 and same.p > 0.5


def test_weighted_harmonic():
    v = {"a": 0.5, "b": 1.0}
    assert weighted_harmonic(v, {"a": 1, "b": 1}) == pytest.approx(2 / (2 + 1))
    assert weighted_harmonic(v, {"a": 0, "b": 1}) == pytest.approx(1.0)
    assert weighted_harmonic({"a": 0.0, "b": 1.0}, {"a": 1, "b": 1}) == 0.0


def test_top_k_breaks_ties_by_name():
    assert top_k({"b": 1.0, "a": 1.0, "c": 0.0}, 1) == {"a"}


@pytest.mark.parametrize(("layers", "heads", "expected"), [(6, 4, 1108), (1, 1, 8), (2, 2, 46)])
def test_edge_count_formula(layers, heads, expected):
    graph = ComputationGraph(n_layers=layers, n_heads=heads, granularity="qkv")
    assert mib_edge_count(layers, heads) == expected == len(graph.edges) == len(set(graph.edges))


@settings(max_examples=20)
@given(st.integers(1, 6), st.integers(1, 6))
def test_edge_count_formula_any_shape(layers, heads):
    graph = ComputationGraph(n_layers=layers, n_heads=heads, granularity="qkv")
    assert len(graph.edges) == mib_edge_count(layers, heads)
    head_level = graph.at("head")
    assert set(graph.head_edges) == set(head_level.edges)
    n = heads + 1
    assert len(head_level.edges) == (heads + 1) * (layers + n * layers * (layers - 1) // 2) + heads * layers + 1 + layers * n


def test_promotion_of_qkv_edges_and_scores():
    graph = ComputationGraph(n_layers=3, n_heads=2, granularity="qkv")
    assert ("m0", "a2.h1<k>") in graph.edge_set
    assert graph.expand_to_qkv(("m0", "a2.h1")) == [("m0", "a2.h1<q>"), ("m0", "a2.h1<k>"), ("m0", "a2.h1<v>")]
    promoted = promote_scores({("m0", "a2.h1<q>"): 0.1, ("m0", "a2.h1<k>"): -0.7, ("m0", "a2.h1<v>"): 0.3})
    assert promoted == {("m0", "a2.h1"): -0.7}
    with pytest.raises(ValueError, match="not in the model"):
        graph.check_node("a3.h0")
    with pytest.raises(ValueError, match="not in the model's graph"):
        graph.check_edge("a1.h0", "a1.h1")  # heads of one layer do not read each other
    graph.check_edge("a1.h0", "m1")  # the MLP reads its own layer's heads
