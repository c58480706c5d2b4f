"""siit.source_attention: the floor on a previous-token busy head's attention to its source, on
hand-set scores where the mass is known, and on case 33 at the seed whose head it frees."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from siit.config import TrainConfig
from siit.distractors import Distractor, DistractorTargets
from siit.export import config_from_training_json
from siit.source_attention import FLOOR, SourceAttention, floor_loss
from siit.train_setup import prepare
from siit.trainer import train

INF = float("inf")


def _distractor(node: str, kind: str = "previous_token", offset: int = 1, at: int | None = None) -> Distractor:
    return Distractor(node=node, kind=kind, offset=offset, variance_factor=1.0, offset_factor=1.0,
                      feature=(0.0,) * 4, position_code=(0.0,) * 6, at=at)


def _targets(distractors: list[Distractor]) -> DistractorTargets:
    tokens = torch.randint(0, 4, (8, 6))
    mask = torch.ones(8, 6, dtype=torch.bool)
    slots = [(int(d.node[1]), int(d.node[-1]) if d.node[0] == "a" else 4) for d in distractors]
    return DistractorTargets.fit(tuple(distractors), slots, tokens, mask, mask, causal=True)


def test_only_heads_that_copy_one_token_everywhere_get_a_source() -> None:
    targets = _targets([_distractor("a0.h0", offset=1), _distractor("a0.h1", kind="running_mean", offset=0),
                        _distractor("a1.h2", offset=2), _distractor("a1.h3", offset=1, at=3),
                        _distractor("m1", kind="token_position", offset=0)])
    sources = SourceAttention.build(targets, 6)
    assert sources.heads == ("a0.h0", "a1.h2") and sources.slots == ((0, 0), (1, 2))
    # x_{t - offset}, and the first input token where there is none that far back (raw_targets)
    assert sources.keys.tolist() == [[1, 1, 1, 2, 3, 4], [1, 1, 1, 1, 2, 3]]
    assert SourceAttention.build(_targets([_distractor("m0", kind="token_position", offset=0)]), 6) is None
    assert SourceAttention.build(None, 6) is None


def test_the_loss_is_the_log_mass_below_the_floor_of_counted_queries() -> None:
    # one head, one row, three queries: mass 0.5 on the source (above the floor), mass 1e-3 (below),
    # and a causal BOS query that sees only itself (not counted)
    low = math.log(1e-3 / (1 - 1e-3))
    scores = torch.tensor([[[[0.0, -INF, -INF],
                             [0.0, 0.0, -INF],
                             [0.0, low, -INF]]]])
    keys = torch.tensor([[1, 1, 1]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss = floor_loss(scores, keys, mask)
    expected = (0.0 + (math.log(FLOOR) - math.log(1e-3))) / 2
    assert math.isclose(float(loss), expected, rel_tol=1e-5)
    assert float(floor_loss(scores, keys, torch.tensor([[True, True, False]]))) == 0.0  # the low query masked


def test_a_head_saturated_on_the_wrong_key_still_gets_a_gradient() -> None:
    """What the floor is for: the softmax's own gradient at the source is e^-20 here, the floor's about 1."""
    scores = torch.tensor([[[[20.0, 0.0]]]], requires_grad=True)  # all the mass on BOS, the source is key 1
    floor_loss(scores, torch.tensor([[1]]), torch.ones(1, 1, dtype=torch.bool)).backward()
    assert scores.grad[0, 0, 0, 1] < -0.99
    mass = torch.softmax(torch.tensor([20.0, 0.0]).requires_grad_(), -1)
    assert mass[1] < 1e-8  # the squared error of the head's output reaches the score through this


def test_a_query_that_sees_no_key_leaves_no_nan_in_the_gradient() -> None:
    scores = torch.tensor([[[[-INF, -INF], [0.0, 1.0]]]], requires_grad=True)
    floor_loss(scores, torch.tensor([[1, 0]]), torch.ones(1, 2, dtype=torch.bool)).backward()
    assert torch.isfinite(scores.grad).all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-30, 30), min_size=2, max_size=6), st.integers(0, 5))
def test_the_loss_is_zero_exactly_when_the_source_has_the_floor(row: list[float], source: int) -> None:
    source = source % len(row)
    scores = torch.tensor(row)[None, None, None]
    loss = float(floor_loss(scores, torch.tensor([[source]]), torch.ones(1, 1, dtype=torch.bool)))
    mass = float(torch.softmax(torch.tensor(row, dtype=torch.float64), -1)[source])
    assert loss >= 0.0
    assert (loss == 0.0) == (mass >= FLOOR) or math.isclose(mass, FLOOR, rel_tol=1e-4)


def test_setup_has_the_sources_only_when_asked_and_old_entries_read_as_without(compiled) -> None:
    cc = compiled("33")
    small = dict(n_train=64, n_val=32, batch_size=16)
    on = prepare(cc, TrainConfig(**small))
    assert on.source_attention is not None
    assert set(on.source_attention.heads) == {d.node for d in on.targets.distractors if d.kind == "previous_token"}
    assert prepare(cc, TrainConfig(**small, busy_attention=False)).source_attention is None
    recorded = TrainConfig(**small, busy_attention=False).to_json()
    assert "busy_attention" not in recorded  # as entries trained before the field recorded it
    training = {"config": recorded, "arch": {"overrides": {}}}
    assert config_from_training_json(training)[0].busy_attention is False


def test_case_33_at_seed_4_meets_the_criterion_quickly(compiled) -> None:
    """Without the floor this seed's a1.h0 sat on BOS for two (token, position) keys, R² 0.88 from step 275
    to 8000 (docs/results.md); with it the run meets the criterion at step 200 on this machine's code."""
    result = train(compiled("33"), TrainConfig(seed=4, epochs=25, max_extensions=0))  # 400 steps at most
    assert result.met_criterion, result.history[-1]["metrics"]
