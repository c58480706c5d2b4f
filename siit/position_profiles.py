"""A busy node's seed -> how its distractor target's variance is spread over positions (issue 32):
at one position (planted large-circuit's heads, siit.distractors.Distractor.at) or by a profile.

Standardised per position (siit.distractors.DistractorTargets.fit), every busy node's target varies
equally at every position, and no circuit node does: a node computing a count or a running mean
varies more at some positions than at others (case 3's circuit: participation ratio over positions
of its output variance 4.82 and 3.77 of 5, against 4.96-5.00 for all eight busy nodes). The
position_spread look read the circuit off that on 15 of 15 main entries. A profile gives each busy
node's target a variance per position: the log of it a random mix of a trend along the positions and
noise, with a sigma per node stratified over [0, TrainConfig.distractor_profile], so some busy nodes
are flat and others peak at a few positions, and the circuit lands among them.

The profile is normalised on the training inputs so that the target's variance averaged over
positions (as siit.distractors.variances pools them) is unchanged: the loudness calibration sees
the same target variance with or without it.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def varying_positions(w: torch.Tensor, causal: bool) -> torch.Tensor:
    """bool [T]: positions where a target varying everywhere varies over the inputs w [B, T] (not BOS
    in a causal model: siit.distractors.bos_quiet)."""
    varies = (w > 0).sum(0) >= 2
    varies[0] = varies[0] and not causal
    return varies


def one_position_spread(at: list[int | None], spread: torch.Tensor, count: torch.Tensor,
                        varies: torch.Tensor) -> torch.Tensor:
    """spread [D, T] with a one-position target's spread at its position `at` shrunk by sqrt(its share
    of the training inputs' counts (float [T]) over the positions where targets vary (bool [T])):
    standardised, it then varies as much averaged over positions (as siit.distractors.variances weighs
    them) as a target varying everywhere, so the same factors scale both."""
    kept = count[varies].sum().clamp(min=1.0)
    spread = spread.clone()
    for i, position in enumerate(at):
        if position is not None and position < spread.shape[1]:
            spread[i, position] = spread[i, position] * (count[position] / kept).clamp(min=1e-6).sqrt()
    return spread


def draw_profiles(n: int, n_ctx: int, sigma_max: float, rng: np.random.Generator) -> list[tuple[float, ...]]:
    """n profiles, [n_ctx] positive factors each (BOS's 1.0): exp(sigma (b s_t + sqrt(1 - b²) e_t))
    with s_t the standardised index of input position t, b ~ U(-1, 1), e_t ~ N(0, 1), sigma at the
    centres of n even strata of [0, sigma_max], shuffled."""
    sigma = sigma_max * (np.arange(n) + 0.5) / max(n, 1)
    sigma = sigma[rng.permutation(n)]
    t = np.arange(1, n_ctx, dtype=np.float64)
    s = (t - t.mean()) / t.std() if n_ctx > 2 else np.zeros_like(t)
    out = []
    for i in range(n):
        b = rng.uniform(-1.0, 1.0)
        log_v = sigma[i] * (b * s + math.sqrt(1.0 - b * b) * rng.standard_normal(t.shape[0]))
        out.append((1.0, *(float(v) for v in np.exp(log_v))))
    return out


def profiled_spread(profiles: list[tuple[float, ...] | None], spread: torch.Tensor, count: torch.Tensor,
                    live: torch.Tensor) -> torch.Tensor:
    """spread [D, T] divided by sqrt(profile) for each distractor that has one (None: unchanged), the
    profile first normalised to mean 1 over the positions where that target varies (bool [D, T]), each
    weighted by its count of training inputs (float [T]): standardised by it, the target's variance
    at position t is the profile's there, and its pooled variance is what it was without one."""
    out = spread.clone()
    T = spread.shape[1]
    for i, profile in enumerate(profiles):
        if profile is None:
            continue
        v = torch.tensor(profile[:T], dtype=spread.dtype)
        weight = count * live[i]
        v = v / ((v * weight).sum() / weight.sum().clamp(min=1e-12))
        out[i] = out[i] / v.sqrt()
    return out
