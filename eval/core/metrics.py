"""Scores or circuits + ground truth -> numbers: ROC / AUROC, pessimistic AUROC, precision /
recall / F1, Jaccard, stability and cross-method convergence (the across-case tests are eval.scoring.stats).

Pure numpy / scipy; no model is touched here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

import numpy as np


@dataclasses.dataclass(frozen=True, kw_only=True)
class Roc:
    """A ROC curve: false- and true-positive rates from (0, 0) to (1, 1), and its area."""

    fpr: tuple[float, ...]
    """False-positive rates, non-decreasing."""
    tpr: tuple[float, ...]
    """True-positive rates, non-decreasing."""
    auroc: float
    """Trapezoid area under (fpr, tpr); NaN when one class is empty."""


def roc(scores: Mapping[str, float], truth: Collection[str]) -> Roc:
    """ROC of a scorer: sweep the threshold down the sorted scores, ties enter together.

    `scores` covers the whole universe (every node or edge); items in `truth` are positives.
    Larger score = more likely in the circuit (pass absolute values for signed attributions).
    """
    names = list(scores)
    values = np.array([scores[n] for n in names], dtype=float)
    if not np.all(np.isfinite(values)):
        raise ValueError("scores must be finite")
    labels = np.array([n in truth for n in names], dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return Roc(fpr=(0.0, 1.0), tpr=(0.0, 1.0), auroc=float("nan"))
    order = np.argsort(-values, kind="stable")
    values, labels = values[order], labels[order]
    tps = np.cumsum(labels)
    fps = np.cumsum(~labels)
    last_of_tie = np.r_[np.nonzero(np.diff(values))[0], len(values) - 1]  # one point per distinct score
    fp = np.r_[0, fps[last_of_tie]]  # the last point is always (1, 1)
    tp = np.r_[0, tps[last_of_tie]]
    fpr, tpr = fp / n_neg, tp / n_pos
    # trapezoid on integer counts, divided once, so a perfect scorer gets exactly 1.0
    area = float(np.sum(np.diff(fp) * (tp[1:] + tp[:-1])) / (2 * n_pos * n_neg))
    return Roc(fpr=tuple(fpr.tolist()), tpr=tuple(tpr.tolist()), auroc=area)


def roc_point(predicted: Collection[str], truth: Collection[str], universe: Collection[str]) -> tuple[float, float]:
    """(fpr, tpr) of one binary circuit."""
    pred, true = set(predicted), set(truth)
    neg = set(universe) - true
    tpr = len(pred & true) / len(true) if true else float("nan")
    fpr = len(pred & neg) / len(neg) if neg else float("nan")
    return fpr, tpr


def pessimistic_auroc(points: Sequence[tuple[float, float]]) -> Roc:
    """InterpBench's AUROC for methods that give one circuit per run (hyperparameter value).

    Each run is a point (fpr, tpr). The pessimistic curve is a staircase that at every fpr takes
    the best tpr reached by a run with fpr no larger: runs are joined by going right first, then
    up, and nothing is interpolated. It starts at (0, 0); (1, 1) is added as the all-in circuit.
    """
    pts = sorted({(float(f), float(t)) for f, t in points if math.isfinite(f) and math.isfinite(t)})
    pts = [(0.0, 0.0)] + pts + [(1.0, 1.0)]
    xs, ys, best = [0.0], [0.0], 0.0
    area = 0.0
    for (f0, _), (f1, t1) in zip(pts, pts[1:]):
        area += (f1 - f0) * best
        if t1 > best:
            xs += [f1, f1]
            ys += [best, t1]
            best = t1
    xs.append(1.0), ys.append(best)
    return Roc(fpr=tuple(xs), tpr=tuple(ys), auroc=float(area))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prf:
    """Precision, recall and F1 of a predicted set against the ground truth."""

    precision: float
    recall: float
    f1: float
    size: int
    """How many items were predicted."""


def prf(predicted: Collection[str], truth: Collection[str]) -> Prf:
    """Precision |P∩T|/|P|, recall |P∩T|/|T|, F1 their harmonic mean (0 when both are 0)."""
    pred, true = set(predicted), set(truth)
    hit = len(pred & true)
    precision = hit / len(pred) if pred else 0.0
    recall = hit / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return Prf(precision=precision, recall=recall, f1=f1, size=len(pred))


def top_k(scores: Mapping[str, float], k: int) -> set[str]:
    """The k items with the largest scores (ties broken by name, so the result is reproducible)."""
    return set(sorted(scores, key=lambda n: (-scores[n], n))[:k])


def above(scores: Mapping[str, float], threshold: float) -> set[str]:
    return {n for n, v in scores.items() if v >= threshold}


def jaccard(a: Collection[str], b: Collection[str]) -> float:
    """|A∩B| / |A∪B|; two empty sets are identical (1)."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def mean_pairwise_jaccard(sets: Sequence[Collection[str]]) -> float:
    """Mean Jaccard over all pairs i < j (CAUSAL-BENCH stability for K seed runs)."""
    pairs = list(itertools.combinations(sets, 2))
    if not pairs:
        raise ValueError("need at least two sets")
    return float(np.mean([jaccard(a, b) for a, b in pairs]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Convergence:
    """CAUSAL-BENCH §2.5: do methods agree beyond chance?"""

    observed: float
    """Mean pairwise Jaccard of the methods' identified sets."""
    null_mean: float
    null_std: float
    z: float
    """(observed - null mean) / null std; NaN when the null has no spread."""
    p: float
    """One-sided permutation p with the observed value counted as one draw, (1 + k) / (1 + B) with
    k = #null draws >= observed: never exactly 0, and exact (valid) for a permutation test."""
    p_paper: float
    """CAUSAL-BENCH §2.5 as written, k / B: reads 0 whenever no null draw reaches the observed value."""
    null: tuple[float, ...]
    """The B null values (random sets of the same sizes drawn from the universe)."""
    consensus: tuple[str, ...]
    """Items every method identified."""
    majority: tuple[str, ...]
    """Items identified by more than half of the methods."""
    matrix: tuple[tuple[float, ...], ...]
    """Pairwise Jaccard between methods, in input order."""
    labels: tuple[str, ...]
    """Method keys, in the order of `matrix`."""


def convergence(
    sets: Mapping[str, Collection[str]], universe: Collection[str], *, permutations: int = 1000, seed: int = 0
) -> Convergence:
    """Permutation test of agreement between m >= 2 methods' identified sets."""
    if len(sets) < 2:
        raise ValueError("convergence needs at least two methods")
    labels = list(sets)
    groups = [set(sets[k]) for k in labels]
    items = sorted(set(universe))
    if any(not g <= set(items) for g in groups):
        raise ValueError("identified sets must lie in the universe")
    observed = mean_pairwise_jaccard(groups)
    rng = np.random.default_rng(seed)
    sizes = [len(g) for g in groups]
    null = np.array([
        mean_pairwise_jaccard([set(rng.choice(len(items), size=s, replace=False).tolist()) for s in sizes])
        for _ in range(permutations)
    ])
    mu, sd = float(null.mean()), float(null.std(ddof=1)) if permutations > 1 else 0.0
    z = (observed - mu) / sd if sd > 0 else float("nan")
    k = int(np.sum(null >= observed - 1e-12))
    p, p_paper = (1 + k) / (1 + permutations), k / permutations
    counts = {n: sum(n in g for g in groups) for n in items}
    m = len(groups)
    return Convergence(
        observed=observed, null_mean=mu, null_std=sd, z=z, p=p, p_paper=p_paper, null=tuple(null.tolist()),
        consensus=tuple(n for n in items if counts[n] == m),
        majority=tuple(n for n in items if counts[n] > m / 2),
        matrix=tuple(tuple(jaccard(a, b) for b in groups) for a in groups),
        labels=tuple(labels),
    )


def weighted_harmonic(values: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """CAUSAL-BENCH composite Σw / Σ(w/v). Values are clipped to [0, 1]; a zero value gives 0."""
    total, denom = 0.0, 0.0
    for key, w in weights.items():
        if w <= 0:
            continue
        v = min(max(values[key], 0.0), 1.0)
        if not math.isfinite(v):
            return float("nan")
        if v == 0:
            return 0.0
        total += w
        denom += w / v
    return total / denom if denom else float("nan")


def chance_auroc(positives: Sequence[frozenset[int]], negatives: Sequence[frozenset[int]], *,
                 reduce: Literal["max", "min"] = "max") -> float:
    """Expected AUROC of a random scorer whose score of each item is the maximum (or minimum) of a
    set of independent, identically distributed continuous draws in (0, 1], sets possibly shared.

    For items with draw sets A and B, the largest (smallest) draw of A ∪ B is equally likely to be
    any of them: with `max` A wins when it lies in A \\ B, with `min` when it lies in B \\ A, and
    they tie when it lies in A ∩ B (one draw decides both). An item with no draws scores 0, below
    every draw. AUROC is the mean over (positive, negative) pairs of P(win) + P(tie) / 2, so its
    expectation is this mean of exact pair probabilities.
    """
    if reduce not in ("max", "min"):
        raise ValueError(f"unknown reduce {reduce!r}; allowed: max, min")
    if not positives or not negatives:
        return float("nan")
    total = 0.0
    for a in positives:
        for b in negatives:
            if not a or not b:
                total += 0.5 if a == b else float(bool(a))
                continue
            wins = len(a - b) if reduce == "max" else len(b - a)
            total += (wins + 0.5 * len(a & b)) / len(a | b)
    return total / (len(positives) * len(negatives))
