"""siit.saturation: the attention-margin loss that trains a family's saturated heads, on hand-set
scores where the gap is known, and the saturation family's keys against its duplicate node."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from planted import get_planted
from planted.failure_modes import _duplicate, _duplicate_keys
from siit.distractors import Distractor
from siit.saturation import (
    MARGIN,
    Saturation,
    gaps,
    margin_loss,
    one_position_keys,
    training_margin_loss,
    with_busy_heads,
)

INF = float("inf")


def test_gap_is_lowest_key_minus_highest_other_visible_key():
    scores = torch.tensor([[[[0.0, 10.0, 2.0, -INF],    # key 1 over key 2: 8; the hidden key does not count
                             [5.0, 4.0, 9.0, 1.0],      # keys 0 and 2: min 5 over max(4, 1) = 1
                             [3.0, -INF, -INF, -INF],   # one visible key: nothing to separate
                             [1.0, 2.0, 3.0, 4.0]]]])   # no key of the head visible... all are others
    keys = torch.tensor([[[[False, True, False, True],
                           [True, False, True, False],
                           [True, False, False, False],
                           [False, False, False, False]]]])
    gap, counted = gaps(scores, keys)
    assert counted.tolist() == [[[True, True, False, False]]]
    assert gap[0, 0, :2].tolist() == [8.0, 1.0]


def test_margin_loss_is_zero_exactly_when_every_counted_gap_reaches_the_margin():
    keys = torch.tensor([[[[True, False, False]]]])
    wide = torch.tensor([[[[MARGIN + 1.0, 0.5, 1.0]]]])
    narrow = torch.tensor([[[[2.0, 0.5, 1.0]]]], requires_grad=True)
    query = torch.ones(1, 1, dtype=torch.bool)
    assert float(margin_loss(wide, keys, query)) == 0.0
    loss = margin_loss(narrow, keys, query)
    assert math.isclose(float(loss.detach()), MARGIN - 1.0)
    loss.backward()  # raises the key's score, lowers the highest other's
    assert narrow.grad.tolist() == [[[[-1.0, 0.0, 1.0]]]]


def test_margin_loss_ignores_uncounted_queries_without_nan_gradients():
    scores = torch.tensor([[[[1.0, -INF, -INF], [2.0, 0.0, -INF], [1.0, 0.0, 0.5]]]], requires_grad=True)
    # query 0 sees one key, query 1 has none of the head's keys, query 2 counts
    keys = torch.tensor([[[[True, False, False], [False, False, False], [True, False, False]]]])
    loss = margin_loss(scores, keys, torch.ones(1, 3, dtype=torch.bool))
    loss.backward()
    assert math.isclose(float(loss.detach()), MARGIN - 0.5)
    assert not torch.isnan(scores.grad).any()
    assert scores.grad[0, 0, :2].abs().sum() == 0  # the uncounted queries take no gradient


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-50, 50))
def test_gaps_ignore_a_shift_every_key_of_a_query_shares(seed, shift):
    """The softmax is invariant to a per-query shift, and so is saturation."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64) * 5
    keys = torch.rand(2, 3, 5, 5, generator=g) < 0.3
    a, ca = gaps(scores, keys)
    b, cb = gaps(scores + shift, keys)
    assert torch.equal(ca, cb)
    assert torch.allclose(a[ca], b[cb], atol=1e-9)


def test_duplicate_keys_are_the_matches_where_the_node_fires_and_bos_elsewhere():
    task = get_planted("saturation")
    tokens, mask = task.encoding.encode(task.case.sample(500, 3))
    digits, real = tokens - task.model.first_value_id, mask.bool()
    keys, fired = _duplicate_keys(digits, real), _duplicate(digits, real).bool()
    assert keys.any(-1).all()  # every query has a key to attend to
    assert torch.equal(keys[..., 1:].any(-1), fired)
    assert torch.equal(keys[..., 0], ~fired)
    same = digits[:, :, None] == digits[:, None, :]
    assert not (keys[..., 1:] & ~same[..., 1:]).any()  # a key of a firing query holds the query's value
    assert torch.equal(task.model.attention_keys(tokens, mask)[0], keys)
    assert task.model.saturated == ("a0.h0",)


def test_a_high_level_model_sets_its_heads_margin() -> None:
    """CausalModel.saturation_margin reaches the loss, the saturated fraction and validation's report
    (through Saturation.build); the saturation family keeps MARGIN, large-circuit trains to 4."""
    import dataclasses

    import pytest

    from siit.config import TrainConfig
    from siit.trainer import prepare

    assert get_planted("saturation").model.saturation_margin == MARGIN == 8.0
    task = get_planted("large-circuit")
    assert task.model.saturation_margin == 4.0
    setup = prepare(task, TrainConfig(n_train=64, n_val=32, batch_size=16, epochs=1))
    assert setup.saturation.margin == 4.0
    # its 69 busy heads vary at one position each and train their attention beside the 30 circuit heads
    busy = setup.targets.distractors
    assert task.distractor_positions == "one" and len(busy) == 69 and all(d.at is not None for d in busy)
    assert setup.saturation.busy == 69 and setup.saturation.heads[30:] == tuple(d.node for d in busy)
    assert torch.equal(setup.saturation.keys[30 + 7, 3], one_position_keys(busy[7], setup.saturation.keys.shape[-1]))
    assert prepare(get_planted("saturation"), TrainConfig(n_train=64, n_val=32, batch_size=16, epochs=1)).saturation.busy == 0
    scores = torch.tensor([[[[0.0, 5.0, 2.0]]]])  # gap 3: below 4 by 1, below 8 by 5
    keys = torch.tensor([[[[False, True, False]]]])
    query = torch.ones(1, 1, dtype=torch.bool)
    assert math.isclose(float(margin_loss(scores, keys, query, 4.0)), 1.0)
    assert math.isclose(float(margin_loss(scores, keys, query)), MARGIN - 3.0)
    with pytest.raises(ValueError, match="saturation_margin must be positive"):
        dataclasses.replace(task.model, saturation_margin=0.0)


def test_one_position_heads_attend_to_their_source_there_and_to_bos_elsewhere() -> None:
    base = dict(node="a0.h1", variance_factor=1.0, offset_factor=1.0, feature=(0.0,) * 7, position_code=())
    prev = Distractor(kind="previous_token", offset=2, at=5, **base)
    mean = Distractor(kind="running_mean", offset=0, at=4, **base)
    k = one_position_keys(prev, 8)
    assert k[5].nonzero().flatten().tolist() == [3]
    assert all(k[q].nonzero().flatten().tolist() == [0] for q in range(8) if q != 5)
    assert one_position_keys(mean, 8)[4].nonzero().flatten().tolist() == [1, 2, 3, 4]
    everywhere = Distractor(kind="previous_token", offset=1, **base)
    assert (one_position_keys(everywhere, 8)[:, 0]).all() and one_position_keys(everywhere, 8).sum() == 8


def test_busy_heads_margin_is_a_term_beside_the_circuits_unchanged() -> None:
    gen = torch.Generator().manual_seed(0)
    n, B, T = 2, 5, 6
    circuit = Saturation(heads=("a0.h0", "a0.h1"), slots=((0, 0), (0, 1)), margin=4.0,
                         keys=torch.rand(n, B, T, T, generator=gen) > 0.6)
    patterns = torch.stack([one_position_keys(Distractor(
        node="a0.h2", kind="previous_token", offset=1, at=3, variance_factor=1.0, offset_factor=1.0,
        feature=(0.0,) * 7, position_code=()), T)])
    both = with_busy_heads(circuit, [(0, 2)], ["a0.h2"], patterns, B)
    assert both.heads == ("a0.h0", "a0.h1", "a0.h2") and both.busy == 1 and both.margin == 4.0
    assert torch.equal(both.keys[:n], circuit.keys) and torch.equal(both.keys[n:], patterns[:, None].expand(1, B, T, T))
    scores = torch.randn(n + 1, B, T, T, generator=gen) * 3
    query = torch.ones(B, T, dtype=torch.bool)
    assert torch.equal(training_margin_loss(circuit, scores[:n], circuit.keys, query),
                       margin_loss(scores[:n], circuit.keys, query, 4.0))
    assert torch.allclose(training_margin_loss(both, scores, both.keys, query),
                          margin_loss(scores[:n], circuit.keys, query, 4.0) + margin_loss(scores[n:], both.keys[n:], query, 4.0))
    alone = with_busy_heads(None, [(0, 2)], ["a0.h2"], patterns, B)
    assert alone.busy == 1 and alone.margin == MARGIN
    assert with_busy_heads(circuit, [], [], patterns[:0], B) is circuit
