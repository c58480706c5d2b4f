"""Periodic checks during training (siit.train_checks): cheap while the criterion is far, the
full evaluation when it is near, and never a different stop than the full evaluation alone."""

from __future__ import annotations

import pytest
import torch

import siit.train_setup
from siit.config import TrainConfig
from siit.trainer import train

CONFIG = dict(n_train=512, n_val=256, batch_size=64, epochs=6, eval_every=4, adaptive=False)


@pytest.mark.parametrize("criterion", [1.0, 0.99])
def test_the_cheap_gate_changes_the_cost_not_the_result(compiled, monkeypatch, criterion: float) -> None:
    cc = compiled("33")
    gated = train(cc, TrainConfig(**CONFIG, criterion=criterion))
    monkeypatch.setattr(siit.train_setup, "CHECK_ROWS", 10**9)  # no subset: every check is full
    full = train(cc, TrainConfig(**CONFIG, criterion=criterion))
    assert gated.steps == full.steps and gated.met_criterion == full.met_criterion
    assert [r["met_criterion"] for r in gated.history] == [r["met_criterion"] for r in full.history]
    sa, sb = gated.model.state_dict(), full.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert gated.metrics == full.metrics  # the final numbers are the full evaluation's
    assert {r["checked_on"] for r in full.history} <= {"padded"}  # case 33 is causal: no other shapes
    checked = [r["checked_on"] for r in gated.history]
    assert "subset" in checked, "the run was far from the criterion at its first checks"
    for record in gated.history:
        if record["met_criterion"]:
            assert record["checked_on"] == "padded"  # a stop is decided on the full set
        if record["checked_on"] == "subset":
            m = record["metrics"]
            assert min(m["accuracy"], m["iia_min"], m["siia_min"]) < criterion or m["distractor_r2_min"] < 0.85


def test_a_small_validation_set_has_no_subset(compiled) -> None:
    cc = compiled("33")
    result = train(cc, TrainConfig(**dict(CONFIG, n_val=siit.train_setup.CHECK_ROWS, epochs=1)))
    assert {r["checked_on"] for r in result.history} <= {"padded"}
