"""Strictness rows that ablate every non-aligned node at once (TrainConfig.strict_all) and the settings
a case bundle trains with (planted.case_bundles.TRAINING): refused out of range, recorded only when set,
read back from old entries, and at 0 the same draws as before the field existed."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from siit.config import ConfigError, TrainConfig
from siit.export import config_from_training_json
from siit.train_step import _sampled_mask, _strict_mask


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_a_share_outside_zero_to_one_is_refused(value):
    with pytest.raises(ConfigError, match="strict_all"):
        TrainConfig(strict_all=value)


def test_the_settings_are_recorded_only_when_set_and_old_entries_read_as_before():
    data = TrainConfig().to_json()
    assert "strict_all" not in data and "view_phase" not in data
    set_ = TrainConfig(strict_all=0.25, view_phase=True).to_json()
    assert set_["strict_all"] == 0.25 and set_["view_phase"] is True
    config, _ = config_from_training_json({"config": data, "arch": {"overrides": {}}})
    assert config.strict_all == 0.0 and config.view_phase is False


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), sampling=st.sampled_from(["one", "half", "mixed"]), per_row=st.booleans())
def test_no_share_draws_what_runs_before_it_drew_and_a_full_share_ablates_all(seed, sampling, per_row):
    g = torch.Generator().manual_seed(seed)
    non_aligned = torch.rand(3, 5, generator=g) < 0.6
    if per_row:
        non_aligned = torch.rand(8, 3, 5, generator=g) < 0.6
    old = _sampled_mask(non_aligned, 8, sampling, torch.Generator().manual_seed(seed))
    assert torch.equal(_strict_mask(non_aligned, 8, sampling, torch.Generator().manual_seed(seed)), old)
    full = _strict_mask(non_aligned, 8, sampling, torch.Generator().manual_seed(seed), every=1.0)
    assert torch.equal(full, non_aligned.expand(8, 3, 5))
    some = _strict_mask(non_aligned, 8, sampling, torch.Generator().manual_seed(seed), every=0.5)
    assert not (some & ~non_aligned.expand(8, 3, 5)).any()  # only ever non-aligned nodes
    rows_all = (some == non_aligned.expand(8, 3, 5)).flatten(1).all(1)
    assert torch.equal(some[~rows_all], old[~rows_all])  # a row not taken keeps its own draw
