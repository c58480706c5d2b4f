"""Busy nodes' per-position variance profiles (siit.position_profiles, TrainConfig.distractor_profile):
identities on hand-made data, and the position_spread look they are made against."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.looks.activations import _participation  # the position_spread look's own ratio
from siit.distractors import DistractorTargets, make_distractors, variances
from siit.position_profiles import draw_profiles, profiled_spread
from token_inputs import token_inputs

NODES = [f"a{l}.h{h}" for l in range(2) for h in range(4)] + ["m0", "m1"]


def _per_position_variance(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[D, T] variance over the inputs that have each position."""
    w = mask.double()
    count = w.sum(0).clamp(min=1)
    mean = (z * w).sum(1) / count
    return (((z - mean[:, None]) ** 2) * w).sum(1) / count


def test_profiles_change_only_the_profile_and_leave_the_pooled_variance() -> None:
    """With a profile every draw but the profile is that of flat targets (old entries' distractors and
    their JSON unchanged), the pooled variance the loudness calibration sees stays 1, and the
    per-position variance follows the profile: flat targets all sit near the largest participation
    ratio, profiled ones spread below it."""
    flat = make_distractors(NODES, d_vocab=9, n_ctx=6, causal=False, seed=5, spread=2.2)
    varied = make_distractors(NODES, d_vocab=9, n_ctx=6, causal=False, seed=5, spread=2.2, profile=1.0)
    assert [dataclasses.replace(d, profile=None) for d in varied] == list(flat)
    assert "profile" in varied[0].to_json() and "profile" not in flat[0].to_json()
    tokens, mask = token_inputs()
    slots = [(0, i) for i in range(len(NODES))]
    z_flat = DistractorTargets.fit(flat, slots, tokens, mask, mask, causal=False).standardised(tokens, mask)
    z_varied = DistractorTargets.fit(varied, slots, tokens, mask, mask, causal=False).standardised(tokens, mask)
    w = mask.float()
    assert variances(z_varied[..., None], w) == pytest.approx(variances(z_flat[..., None], w), rel=1e-4)
    v_flat, v_varied = _per_position_variance(z_flat, mask)[:, 1:], _per_position_variance(z_varied, mask)[:, 1:]
    wanted = torch.tensor([d.profile[1:] for d in varied], dtype=torch.float64)
    ratio = v_varied / wanted  # the profile up to its normalisation
    assert torch.allclose(ratio, ratio[:, :1].expand_as(ratio), rtol=1e-3)
    pr_flat, pr_varied = [_participation(v) for v in v_flat], [_participation(v) for v in v_varied]
    assert min(pr_flat) > 4.95
    assert min(pr_varied) < 4.0 and max(pr_varied) > 4.8


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(3, 16), st.floats(0.0, 3.0), st.integers(0, 2**32 - 1))
def test_drawn_profiles_are_positive_and_stratified(n: int, n_ctx: int, sigma_max: float, seed: int) -> None:
    """Every profile is n_ctx positive factors with BOS's 1; the same seed draws the same profiles."""
    a = draw_profiles(n, n_ctx, sigma_max, np.random.default_rng(seed))
    assert a == draw_profiles(n, n_ctx, sigma_max, np.random.default_rng(seed))
    assert len(a) == n and all(len(p) == n_ctx and p[0] == 1.0 and min(p) > 0 for p in a)
    if sigma_max == 0.0:
        assert all(set(p) == {1.0} for p in a)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.05, 20.0), min_size=4, max_size=4), st.lists(st.integers(1, 500), min_size=4, max_size=4))
def test_profiled_spread_keeps_the_count_weighted_mean_variance(profile: list[float], counts: list[int]) -> None:
    """1 / spread² (the standardised variance) averaged over varying positions by their counts is 1
    for any profile and counts; a distractor without a profile keeps its spread."""
    spread = torch.ones(2, 4)
    count = torch.tensor(counts, dtype=torch.float32)
    varies = torch.tensor([False, True, True, True])
    out = profiled_spread([(1.0, *profile[1:]), None], spread, count, varies.expand(2, -1))
    var = 1.0 / out[0] ** 2
    assert float((var * count * varies).sum() / (count * varies).sum()) == pytest.approx(1.0, rel=1e-4)
    assert torch.equal(out[1], spread[1])
