"""The regression loss (siit.losses.regression_loss, TrainConfig.regression_hinge): squared error plus a
hinge past half the tolerance, so that near-misses, which the criterion counts and a mean of squares
barely moves, get the gradient."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

from siit.config import ConfigError, TrainConfig
from siit.export import config_from_training_json
from siit.losses import output_loss, regression_loss

errors = st.lists(st.floats(-0.5, 0.5, allow_nan=False, width=32), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(errors, st.floats(0.0, 50.0), st.floats(0.001, 0.2))
def test_squared_error_within_the_margin_and_more_past_it(e: list[float], hinge: float, margin: float) -> None:
    """e² exactly where |e| <= margin; past it e² + hinge (|e| - margin)², so never less than e²; the
    same for e and -e; nondecreasing in |e|; hinge 0 is e² everywhere."""
    err = torch.tensor(e, dtype=torch.float64)
    loss = regression_loss(err, torch.zeros_like(err), hinge, margin)
    inside = err.abs() <= margin
    assert torch.equal(loss[inside], err[inside] ** 2)
    assert torch.allclose(loss[~inside], err[~inside] ** 2 + hinge * (err[~inside].abs() - margin) ** 2)
    assert bool((loss >= err**2).all())
    assert torch.equal(loss, regression_loss(-err, torch.zeros_like(err), hinge, margin))
    order = err.abs().argsort()
    assert bool((loss[order].diff() >= -1e-15).all())
    assert torch.equal(regression_loss(err, torch.zeros_like(err), 0.0, margin), err**2)


def test_gradient_past_the_margin_weighs_one_plus_hinge_times_more_at_the_far_end() -> None:
    """The hinge's point: d loss / d e is 2e inside the margin and 2e + 2·hinge·(|e| - margin) past it,
    so an error at the tolerance (twice the margin) pulls 1 + hinge/2 times as hard as MSE's."""
    hinge, margin = 10.0, 0.025
    e = torch.tensor([0.01, 0.05, -0.05], dtype=torch.float64, requires_grad=True)
    regression_loss(e, torch.zeros_like(e), hinge, margin).sum().backward()
    mse = 2 * e.detach()
    assert torch.allclose(e.grad, mse * torch.tensor([1.0, 1 + hinge / 2, 1 + hinge / 2], dtype=torch.float64))


def test_output_loss_is_plain_mse_without_a_hinge_and_classification_never_sees_one() -> None:
    """Hinge 0 gives torch's MSE bit for bit (entries trained before the hinge train the same weights
    when resumed); a classification loss ignores the hinge; a weight of ones is the unweighted mean."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 1, generator=gen)
    targets = torch.randn(3, 6, generator=gen)
    mask = torch.rand(3, 6, generator=gen) < 0.7
    plain = output_loss(logits, targets, mask, "regression")
    assert torch.equal(plain, F.mse_loss(logits[..., 0][mask], targets[mask]))
    assert torch.equal(output_loss(logits, targets, mask, "regression", hinge=(0.0, 0.025)), plain)
    hinged = output_loss(logits, targets, mask, "regression", hinge=(10.0, 0.025))
    assert float(hinged) > float(plain)
    assert torch.allclose(output_loss(logits, targets, mask, "regression", torch.ones(3, 6), (10.0, 0.025)), hinged)
    cls_logits = torch.randn(3, 6, 5, generator=gen)
    labels = torch.randint(0, 5, (3, 6), generator=gen)
    assert torch.equal(output_loss(cls_logits, labels, mask, "classification", hinge=(10.0, 0.025)),
                       F.cross_entropy(cls_logits[mask], labels[mask]))


def test_default_is_recorded_old_entries_read_as_plain_mse_and_bad_values_are_refused() -> None:
    assert TrainConfig().regression_hinge == 10.0
    assert TrainConfig().to_json()["regression_hinge"] == 10.0
    old = {k: v for k, v in TrainConfig().to_json().items() if k != "regression_hinge"}
    assert config_from_training_json({"config": old, "arch": {"overrides": {}}})[0].regression_hinge == 0.0
    for bad in ({"regression_hinge": -1.0}, {"regression_hinge": float("inf")}, {"regression_tolerance": 0.0}):
        with pytest.raises(ConfigError):
            TrainConfig(**bad)


@pytest.mark.slow
def test_case_3_meets_its_edge_criterion_by_default(tmp_path) -> None:
    """With plain MSE (regression_hinge 0), case 3 (regression, edge-level strictness) did not meet in
    8000 steps on the twenty-ninth session's machine: single edges moved a few outputs just past the
    tolerance. With the hinge it meets in 1025-2150 steps at seeds 0-2 (docs/results.md)."""
    import json

    from zoo.cli import main

    assert main(["train", "case", "3", "--root", str(tmp_path), "--json"]) == 0
    training = json.loads((tmp_path / "entries" / "case-3" / "training.json").read_text())
    assert training["met_criterion"] and training["steps"] <= 4000
