"""Per-method samples across entries -> InterpBench's RQ4 tests: the two-sided Wilcoxon-Mann-Whitney
U test and the Vargha-Delaney A12 effect size, for one pair or for every pair of methods.

InterpBench §5 RQ4 and Tables 8-9 compare edge AUROCs across cases this way: p < 0.05 rejects that
two methods' AUROCs come from one distribution; A12 = P(X > Y) + ½ P(X = Y) says by how much
(0.56 small, 0.64 medium, 0.71 large, and the mirror images below 0.5). A12 = U / (n·m), where U is
the first sample's Mann-Whitney statistic (ties count ½), so A12(x, y) + A12(y, x) = 1.

A table of k methods makes k(k-1)/2 tests; InterpBench reads each at p < 0.05, so some pairs come
out "different" by chance alone. The zoo also reports Holm's adjusted p (family-wise error over the
table) and stars a pair only on that, and only with MIN_ENTRIES entries per method.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

TestKind = Literal["exact", "asymptotic", "degenerate"]
Magnitude = Literal["negligible", "small", "medium", "large"]
EXACT_MAX = 50
"""Largest sample size for which the exact null distribution is used (no ties only)."""
ALPHA = 0.05
MIN_ENTRIES = 5
"""Fewest entries each method needs before a pair can be called different: with 4 and 4 the exact
two-sided p cannot go below 2/70 = 0.029, so any correction for a handful of pairs leaves nothing
that could be significant, and a star would only ever mean luck."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Comparison:
    """Two methods' values across entries: Wilcoxon-Mann-Whitney and Vargha-Delaney A12."""

    p: float
    """Two-sided Mann-Whitney U p-value."""
    u: float
    """U statistic of the first method (pairs it wins, ties count ½)."""
    a12: float
    """P(X > Y) + 0.5 P(X = Y), X from the first method, Y from the second."""
    n_a: int
    """Values of the first method."""
    n_b: int
    """Values of the second method."""
    test: TestKind = "asymptotic"
    """How p was computed: the exact null distribution (no ties, both sizes <= EXACT_MAX), the
    normal approximation with tie and continuity corrections, or `degenerate` (every value equal:
    p = 1, nothing to tell apart)."""


def vargha_delaney(a: Sequence[float], b: Sequence[float]) -> float:
    """A12 = P(X > Y) + 0.5 P(X = Y) over all n·m pairs."""
    x, y = np.asarray(a, dtype=float)[:, None], np.asarray(b, dtype=float)[None, :]
    return float(((x > y).sum() + 0.5 * (x == y).sum()) / (x.size * y.size))


def magnitude(a12: float) -> Magnitude:
    """Vargha & Delaney's reading of |A12 - 0.5| (InterpBench Table 9's thresholds)."""
    d = abs(a12 - 0.5)
    return "large" if d > 0.21 else "medium" if d > 0.14 else "small" if d > 0.06 else "negligible"


def compare_methods(a: Sequence[float], b: Sequence[float]) -> Comparison:
    """InterpBench's test between two methods' samples (one value per entry)."""
    from scipy.stats import mannwhitneyu

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) == 0 or len(y) == 0 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("need finite values for both methods")
    both = np.concatenate([x, y])
    a12 = vargha_delaney(x, y)
    if np.all(both == both[0]):  # zero variance: the normal approximation divides by 0
        return Comparison(p=1.0, u=a12 * len(x) * len(y), a12=a12, n_a=len(x), n_b=len(y), test="degenerate")
    # the exact distribution assumes no ties; with ties the normal approximation corrects for them
    test: TestKind = "exact" if len(np.unique(both)) == len(both) and max(len(x), len(y)) <= EXACT_MAX else "asymptotic"
    result = mannwhitneyu(x, y, alternative="two-sided", method=test)
    return Comparison(p=min(1.0, float(result.pvalue)), u=float(result.statistic), a12=a12,
                      n_a=len(x), n_b=len(y), test=test)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairTest:
    """One cell of the RQ4 table: method `a` against method `b`."""

    a: str
    """Row method."""
    b: str
    """Column method."""
    comparison: Comparison
    """U, p and A12 of a's values against b's."""
    magnitude: Magnitude
    """How large A12's distance from 0.5 is."""
    p_holm: float = 1.0
    """p after Holm's step-down correction over every pair of the table (family-wise error)."""

    @property
    def significant(self) -> bool:
        """Whether the table may star this pair: Holm-adjusted p < ALPHA and at least MIN_ENTRIES
        entries for each method."""
        c = self.comparison
        return self.p_holm < ALPHA and min(c.n_a, c.n_b) >= MIN_ENTRIES


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input's order: the i-th smallest of m becomes
    max over j <= i of min(1, (m - j + 1) p_(j)). Rejecting where adjusted p < alpha controls the
    family-wise error rate at alpha for any dependence between the tests (Holm 1979)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


def pairwise_tests(samples: Mapping[str, Sequence[float]]) -> tuple[PairTest, ...]:
    """Every unordered pair of methods (in the mapping's order, a before b), skipping methods
    with no finite value. The matrix's other half is A12(b, a) = 1 - A12(a, b), same p."""
    clean = {k: [float(v) for v in vs if v is not None and np.isfinite(v)] for k, vs in samples.items()}
    keys = [k for k, vs in clean.items() if vs]
    out = []
    for a, b in itertools.combinations(keys, 2):
        c = compare_methods(clean[a], clean[b])
        out.append(PairTest(a=a, b=b, comparison=c, magnitude=magnitude(c.a12)))
    adjusted = holm([t.comparison.p for t in out])
    return tuple(dataclasses.replace(t, p_holm=q) for t, q in zip(out, adjusted))


def a12_matrix(keys: Sequence[str], tests: Sequence[PairTest]) -> list[list[float | None]]:
    """Square A12 matrix over `keys`, row against column; None on the diagonal and for methods
    that were not compared."""
    index = {k: i for i, k in enumerate(keys)}
    m: list[list[float | None]] = [[None] * len(keys) for _ in keys]
    for t in tests:
        if t.a in index and t.b in index:
            m[index[t.a]][index[t.b]] = t.comparison.a12
            m[index[t.b]][index[t.a]] = 1.0 - t.comparison.a12
    return m
