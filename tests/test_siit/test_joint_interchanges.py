"""Joint interchanges (siit.correspondence.Correspondence.joint, siit.logit_shifts): IIT draws and IIA
judges groups of high-level nodes like nodes, and the logit shift validation reports is 0 exactly when
an intervention leaves the logits alone (up to a shift every class shares)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from planted import get_planted
from planted.failure_modes import COPIES
from siit.config import ArchConfig, TrainConfig
from siit.correspondence import Correspondence, NodeLayout
from siit.logit_shifts import logit_shifts, relative_logit_shift
from siit.train_setup import prepare
from siit.initialise import init_weights
from siit.transformer import Transformer


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), shift=st.floats(-50, 50), scale=st.floats(0.01, 100))
def test_logit_shift_is_zero_for_a_shared_shift_and_scale_free(seed, shift, scale) -> None:
    gen = torch.Generator().manual_seed(seed)
    clean, other = torch.randn(3, 4, 5, generator=gen), torch.randn(3, 4, 5, generator=gen)
    lm = torch.rand(3, 4, generator=gen) < 0.7
    lm[0, 0] = True
    # a shift every class shares changes no probability: no shift
    assert float(relative_logit_shift(clean + shift, clean, lm)) < 1e-6 * max(1.0, shift**2)
    # relative: scaling both runs' logits leaves it as it was
    base = float(relative_logit_shift(other, clean, lm))
    assert base > 0
    assert float(relative_logit_shift(other * scale, clean * scale, lm)) == pytest.approx(base, rel=1e-3)


def test_joint_groups_are_interventions_after_the_nodes() -> None:
    low = NodeLayout(2, 2)
    corr = Correspondence(mapping={"a0.h0": ("a0.h1",), "a0.h1": ("a0.h0",), "m0": ("m0",)},
                          high=NodeLayout(1, 2), low=low, joint=(("a0.h0", "a0.h1"),))
    assert corr.interventions == ("a0.h0", "a0.h1", "m0", "a0.h0+a0.h1")
    assert corr.selects().tolist() == [[True, False, False], [False, True, False], [False, False, True],
                                       [True, True, False]]
    assert torch.equal(corr.low_masks()[3], low.mask(["a0.h0", "a0.h1"]))
    with pytest.raises(ValueError, match="two or more distinct"):
        Correspondence(mapping=corr.mapping, high=corr.high, low=low, joint=(("a0.h0", "a0.h0"),))
    with pytest.raises(ValueError, match="two or more distinct"):
        Correspondence(mapping=corr.mapping, high=corr.high, low=low, joint=(("a0.h0", "nope"),))


def test_redundancy_setup_draws_and_judges_its_joint_groups() -> None:
    task = get_planted("redundancy")
    s = prepare(task, TrainConfig(n_train=256, n_val=64, epochs=1), ArchConfig())
    names = s.corr.interventions
    assert s.high_masks.shape[0] == s.low_masks.shape[0] == len(names) == 8
    assert names[4:] == ("a0.h0+a0.h1", "a0.h0+a0.h2", "a0.h1+a0.h2", "a0.h0+a0.h1+a0.h2")
    # the evaluator's IIT targets follow the same interventions, and IIA names the groups
    assert s.evaluator.iit_targets.shape[0] == 8
    assert "iia:a0.h0+a0.h1+a0.h2" in s.evaluator.groups()[0]
    # a model without joint groups: one intervention per node, as before
    plain = prepare(get_planted("cancellation"), TrainConfig(n_train=256, n_val=64, epochs=1))
    assert plain.corr.interventions == plain.corr.high_nodes and plain.high_masks.shape[0] == 3


def test_validation_reports_each_interventions_logit_shift() -> None:
    task = get_planted("redundancy")
    s = prepare(task, TrainConfig(n_train=256, n_val=64, epochs=1), ArchConfig())
    model = Transformer(s.low_config)
    init_weights(model, torch.Generator().manual_seed(0))
    d = s.evaluator.data
    acts = model(d.tokens, d.mask, return_acts=True, present=d.present)[1].detach()
    out = logit_shifts(model, s.evaluator, acts)
    assert list(out["per_intervention"]) == list(s.corr.interventions)
    row = out["per_intervention"]["a0.h0+a0.h1+a0.h2"]
    assert row["relative_shift"] > 0 and 0 <= row["answer_changed"] <= 1
    grouped = out["grouped"]
    assert grouped["nodes"] == list(COPIES)
    assert grouped["relative_shift_alone_max"] == max(out["per_intervention"][n]["relative_shift"] for n in COPIES)
    joint = [n for n in s.corr.interventions if "+" in n]
    assert grouped["relative_shift_joint_min"] == min(out["per_intervention"][g]["relative_shift"] for g in joint)
    # no joint groups: nothing grouped
    plain = dataclasses.replace(s.evaluator, correspondence=dataclasses.replace(s.corr, joint=()))
    assert logit_shifts(model, plain, acts)["grouped"] is None


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-100, 100), margin=st.floats(0.5, 20))
def test_template_loss_is_zero_on_the_template_and_blind_to_a_shared_shift(seed, shift, margin):
    """siit.losses.template_loss pins the centred logits: zero exactly on margin x (one-hot - 1/V), the
    same for logits every class shifts alike, and positive elsewhere."""
    from siit.losses import template_loss

    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, 5, (3, 4), generator=g)
    mask = torch.rand(3, 4, generator=g) < 0.8
    mask[0, 0] = True
    template = margin * (torch.nn.functional.one_hot(targets, 5).double() - 0.2)
    assert float(template_loss(template + shift, targets, mask, margin)) < 1e-9
    noisy = template + torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    loss = float(template_loss(noisy, targets, mask, margin))
    assert loss > 0
    assert abs(float(template_loss(noisy + shift, targets, mask, margin)) - loss) < 1e-6 * max(1.0, loss)
