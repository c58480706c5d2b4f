"""Standardised targets and the mean output norm a busy node should have -> the constant offset of its
target (siit.distractors: a busy node's loudness is set by its variance and its mean norm, and the
offset is what sets the norm at a given variance)."""

from __future__ import annotations

import torch


def offsets_for_norm(z: torch.Tensor, scale: torch.Tensor, norm: torch.Tensor, iters: int = 40, *,
                     z_stats: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """[D] offsets o with mean |o + scale z| = norm over each row of z [D, N] (scale, norm [D]).

    mean |o + scale z| is convex in o with its minimum at o* = -scale median(z) and grows without
    bound above it, so bisection on [o*, o* + norm + scale mean|z| + |o*|] finds the root; a norm
    below the minimum gets o* (the quietest the target can be at that variance). z_stats: z's
    (median, mean |z|) per row when the caller keeps them (z is fixed over training)."""
    if z.numel() == 0:
        return norm.clone()
    median, abs_mean = z_stats if z_stats is not None else row_stats(z)
    lo = -scale * median
    hi = lo + lo.abs() + norm + scale * abs_mean + 1e-6
    scaled = scale[:, None] * z  # the same every iteration: computed once
    for _ in range(iters):
        mid = (lo + hi) / 2
        above = (mid[:, None] + scaled).abs().mean(1) > norm
        new_hi, new_lo = torch.where(above, mid, hi), torch.where(above, lo, mid)
        # a fixed point (float32 cannot split any interval further) repeats itself: stopping
        # there returns what the remaining iterations would (about 25 of 40 run)
        if torch.equal(new_hi, hi) and torch.equal(new_lo, lo):
            break
        hi, lo = new_hi, new_lo
    return (lo + hi) / 2


def row_stats(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[D] median and [D] mean |z| of each row of z [D, N]."""
    return z.median(dim=1).values, z.abs().mean(1)
