"""The busy nodes' loudness during training (siit.loudness) and the source weights and drawn shapes
it rests on (siit.data): identities on hand-made data."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from siit.data import SHAPES, pair_sources, random_shapes, source_length_weights
from siit.distractors import DistractorTargets, make_distractors, variances
from siit.loudness import GAIN_RANGE, Loudness, shape_groups


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=60))
def test_source_weights_give_back_the_inputs_length_distribution(lengths: list[int]) -> None:
    """Under source_not_shorter a source of length l has probability sum over bases lb <= l of
    p(lb) p(l) / P(L >= lb); weighted, the sources' lengths are distributed as the inputs'."""
    lengths_t = torch.tensor(lengths)
    w = source_length_weights(lengths_t, "source_not_shorter").double()
    n = torch.bincount(lengths_t).double()
    p = n / n.sum()
    tail = torch.tensor([float(p[l:].sum()) for l in range(len(p))])
    p_source = torch.tensor([sum(float(p[b] * p[l] / tail[b]) for b in range(1, l + 1) if p[b] > 0)
                             for l in range(len(p))])
    assert torch.allclose(w * p_source, p, atol=1e-6)
    assert torch.equal(source_length_weights(lengths_t, "independent"), torch.ones(len(p)))


def test_source_weights_undo_the_pairing_on_drawn_sources() -> None:
    lengths = torch.randint(1, 6, (20000,), generator=torch.Generator().manual_seed(0))
    sources = pair_sources(lengths, torch.arange(len(lengths)), "source_not_shorter", torch.Generator().manual_seed(1))
    drawn = lengths[sources]
    w = source_length_weights(lengths, "source_not_shorter")[drawn]
    assert drawn.float().mean() > lengths.float().mean() + 0.5  # sources run long
    for n in range(1, 6):
        weighted = float(w[drawn == n].sum() / w.sum())
        assert weighted == pytest.approx(float((lengths == n).float().mean()), abs=0.01)


def test_random_shapes_name_the_shape_drawn_even_where_no_pad_is_left() -> None:
    lengths = torch.tensor([2] * 1500 + [4] * 1500)  # n_ctx 5: the length-4 rows have no PAD to keep
    kept, shape = random_shapes(lengths, 5, torch.Generator().manual_seed(0))
    n_pad = 5 - 1 - lengths
    assert (kept[shape == SHAPES.index("unpadded")] == 0).all()
    assert torch.equal(kept[shape == SHAPES.index("padded")], n_pad[shape == SHAPES.index("padded")])
    full = lengths == 4
    for name in SHAPES:  # each shape drawn about a third of the time, full-length rows included
        assert 0.28 < float((shape[full] == SHAPES.index(name)).float().mean()) < 0.39


def test_gains_trim_loud_nodes_and_never_pass_one() -> None:
    loud = Loudness(3)
    log_ratio = torch.log(torch.tensor([[2.0, 1.5], [1.0, 1.0], [0.5, 0.25]]))
    for _ in range(400):
        loud.calibrate(log_ratio)
    assert loud.gain[0].tolist() == pytest.approx([GAIN_RANGE[0]] * 2)  # too loud: trimmed to the floor
    assert loud.gain[1].tolist() == [1.0, 1.0]  # as wanted: untouched
    assert loud.gain[2].tolist() == [1.0, 1.0]  # too quiet (still learning): never raised above 1
    once = Loudness(1)
    once.calibrate(torch.log(torch.tensor([[1.2, 1.1]])))
    assert once.gain[0].tolist() == pytest.approx([1.2 ** -0.05, 1.1 ** -0.05])


def test_each_shape_class_is_scaled_to_its_own_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 6, (300, 6), generator=gen)
    mask = torch.ones_like(tokens)
    spec = make_distractors(["a0.h0", "a0.h1"], d_vocab=6, n_ctx=6, causal=False, seed=0, spread=2.0)
    targets = DistractorTargets.fit(spec, [(0, 0), (0, 1)], tokens, mask, mask.bool(), causal=False)
    loud = Loudness(2)
    loud.reference.copy_(torch.tensor([1.0, 2.0]))
    loud.reference_unpadded.copy_(torch.tensor([4.0, 3.0]))
    loud.gain.copy_(torch.tensor([[0.5, 0.8], [1.0, 1.0]]))
    padded = torch.arange(300) % 2 == 0
    y = loud.targets(targets, targets.standardised(tokens, mask), padded)
    assert torch.equal(y[:, padded], targets(tokens, mask, loud.reference, loud.gain)[:, padded])
    assert torch.equal(y[:, ~padded], targets(tokens, mask, loud.reference_unpadded, loud.gain)[:, ~padded])
    # the gain scales the variance and the norm the target is built for
    plain = targets(tokens, mask, loud.reference)
    assert y[0, padded].var(0).mean() / plain[0, padded].var(0).mean() == pytest.approx(0.5, rel=1e-4)
    weight = torch.rand(300, 6, generator=gen)
    groups = shape_groups(weight, padded)
    assert [w for w, _ in groups] == ["reference", "reference_unpadded"]
    assert torch.equal(groups[0][1] + groups[1][1], weight)
    assert shape_groups(weight, None) == [("reference", weight)]


def test_weighted_variance_counts_a_row_as_its_weight() -> None:
    """Weight 2 on a row is the row taken twice (what the length weights rely on)."""
    out = torch.randn(1, 5, 3, 4, generator=torch.Generator().manual_seed(0))
    weight = torch.tensor([2.0, 1.0, 1.0, 1.0, 1.0])[:, None].expand(5, 3)
    twice = torch.cat([out, out[:, :1]], dim=1)
    assert variances(out, weight).item() == pytest.approx(variances(twice, torch.ones(6, 3)).item(), rel=1e-5)


def test_one_position_targets_vary_only_there_and_as_much_as_dense_ones() -> None:
    """DistractorPositions "one": a head's standardised target is 0 off its position, and averaged over
    positions (as `variances` weighs them) it varies as much as a target varying everywhere, so the
    factors scale both alike; MLPs and the draws of "every" are unchanged."""
    nodes = [f"a0.h{i}" for i in range(8)] + ["m0"]
    dense = make_distractors(nodes, d_vocab=7, n_ctx=14, causal=True, seed=3, spread=2.2)
    one = make_distractors(nodes, d_vocab=7, n_ctx=14, causal=True, seed=3, spread=2.2, positions="one")
    assert [dataclasses.replace(d, at=None) for d in one] == list(dense)
    assert one[-1].at is None and all(2 <= d.at < 14 for d in one[:-1])
    assert "at" in one[0].to_json() and "at" not in dense[0].to_json()  # old entries' JSON unchanged
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 14, (3000,), generator=gen)
    mask = torch.arange(14)[None] <= lengths[:, None]
    tokens = torch.randint(1, 6, (3000, 14), generator=gen)
    tokens[:, 0], tokens[~mask] = 0, 6
    slots = [(0, i) for i in range(len(nodes))]
    z_one = DistractorTargets.fit(one, slots, tokens, mask, mask, causal=True).standardised(tokens, mask)
    z_dense = DistractorTargets.fit(dense, slots, tokens, mask, mask, causal=True).standardised(tokens, mask)
    at = torch.tensor([d.at for d in one[:-1]])
    off = torch.arange(14)[None, :] != at[:, None]  # [heads, T]
    assert (z_one[:-1][off[:, None, :].expand(-1, 3000, -1)] == 0).all()
    w = mask.float()
    assert variances(z_one[:-1, ..., None], w) == pytest.approx(variances(z_dense[:-1, ..., None], w), rel=1e-4)
    assert torch.equal(z_one[-1], z_dense[-1])
