"""Counts -> an upper confidence bound on a proportion: k of n sampled units changed, so the
proportion p in the population they were drawn from is at most `upper_bound(k, n)` at 95%.

One-sided exact (Clopper-Pearson) bound: the p at which seeing k or fewer of n has probability
1 - confidence, P(X <= k | n, p) = 1 - confidence; for k = 0 that is 1 - (1 - confidence)^(1/n)
(the rule of three's exact form: 300 units with none changed give 0.00994). Pure Python: the
binomial CDF is summed in log space (lgamma, scaled by its largest term), the bound found by
bisection. validation.json's `effect_bounds` (siit.effect_bounds) and `edge_effects`
(zoo.edge_exactness) use it with the sequence as the unit.
"""

from __future__ import annotations

import math
import operator

__all__ = ["binomial_cdf", "upper_bound"]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), accurate to a few ulps for any n (log-space terms)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(n + 1)
    terms = [log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """The one-sided Clopper-Pearson upper bound on p after k successes in n trials: the largest p
    with P(X <= k | n, p) >= 1 - confidence (1.0 when k = n)."""
    k, n = operator.index(k), operator.index(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n, n >= 1 (got k={k!r}, n={n!r})")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1) (got {confidence!r})")
    alpha = 1.0 - confidence
    if k == n:
        return 1.0
    if k == 0:
        return -math.expm1(math.log(alpha) / n)  # 1 - alpha^(1/n), without cancellation
    lo, hi = 0.0, 1.0  # the CDF falls from 1 at p = 0 to 0 at p = 1
    while hi - lo > 1e-15 * max(hi, 1e-300):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if binomial_cdf(k, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi
