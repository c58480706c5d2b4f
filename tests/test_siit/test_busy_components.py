"""Busy nodes whose targets carry several scalars (siit.busy_components, TrainConfig.distractor_components):
the draw, the targets' identities, and a trained model whose busy nodes write more than one direction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.looks.activations import _participation
from siit.busy_components import (MAX_COMPONENTS, MIN_SHARE, ComponentTargets, component_names, draw_components,
                                  shares_for, uncorrelated)
from siit.busy_ranks import RankReference
from siit.config import ConfigError, TrainConfig
from siit.distractors import DistractorTargets, make_distractors, variances
from siit.export import config_from_training_json
from token_inputs import token_inputs

NODES = [f"a{l}.h{h}" for l in range(2) for h in range(4)] + ["m0", "m1"]
WEIGHT = np.array([0.0, 0.0] + [1.0] * 7)  # tokens 2-8 at input positions; BOS 0 and PAD 1 never


def _spec(components: int, d_head: int = 4):
    flat = make_distractors(NODES, d_vocab=9, n_ctx=6, causal=True, seed=5, spread=2.2)
    return flat, draw_components(flat, components, WEIGHT, 5, d_head)


def test_one_component_leaves_every_draw_and_record_as_before() -> None:
    flat, same = _spec(1)
    assert same == flat
    assert all("component_shares" not in d.to_json() for d in same)
    assert "distractor_components" not in TrainConfig().to_json()  # old entries' configs compare equal
    config, _ = config_from_training_json({"config": TrainConfig().to_json(), "arch": {"overrides": {}}})
    assert config.distractor_components == 1
    from siit.train_setup import Trainee
    from siit.transformer import Transformer

    model = Transformer({"n_layers": 1, "d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16, "d_vocab": 5,
                         "d_vocab_out": 2, "n_ctx": 4, "attention_dir": "causal", "act_fn": "gelu"})
    assert not any("component" in k for k in Trainee(model, 2).state_dict())  # checkpoints as before
    assert Trainee(model, 2, 3).state_dict()["component_probes"].shape == (3, 8)


def test_components_change_only_the_components_and_draw_factors_around_the_circuit() -> None:
    flat, many = _spec(4)
    for a, b in zip(flat, many):
        assert dataclasses.replace(b, components=(), rank_factor=None) == a
        assert 1 <= len(b.components) <= 3 and b.rank_factor is not None
    factors = sorted(d.rank_factor for d in many)
    assert 0.5 <= factors[0] < 0.6 and 1.8 < factors[-1] <= 2.0  # stratified log-even over [1/2, 2]
    assert np.allclose(np.diff(np.log(factors)), np.log(4) / len(many), atol=1e-5)
    assert many == _spec(4)[1]  # reproducible from the seed
    assert TrainConfig(distractor_components=4).to_json()["distractor_components"] == 4
    assert all("rank_factor" in d.to_json() for d in many)


def test_heads_carry_no_more_components_than_their_width() -> None:
    _, narrow = _spec(6, d_head=2)
    assert all(len(d.components) <= 1 for d in narrow if d.node.startswith("a"))
    assert max(len(d.components) for d in narrow if d.node.startswith("m")) >= 2


@pytest.mark.parametrize("bad", [0, 7, True, 2.0])
def test_config_refuses_a_component_count_out_of_range(bad) -> None:
    with pytest.raises(ConfigError, match="distractor_components"):
        TrainConfig(distractor_components=bad)


@settings(max_examples=50, deadline=None)
@given(st.floats(1.0, 6.0), st.integers(2, 6))
def test_shares_give_the_participation_ratio_asked_for(ratio: float, k: int) -> None:
    ratio = min(ratio, k)
    shares = shares_for(ratio, k)
    eig = torch.tensor([1.0, *shares], dtype=torch.float64)
    assert len(shares) == k - 1 and all(0 <= s <= 1 for s in shares)
    assert list(shares) == sorted(shares, reverse=True)  # filled in order: one partial share at most
    assert sum(0 < s < 1 for s in shares) <= 1
    assert _participation(eig) == pytest.approx(ratio, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.floats(1.0, 5.9), st.floats(0.0, 0.1))
def test_shares_move_continuously_with_the_ratio(ratio: float, step: float) -> None:
    """More directions asked, no share falls; a tiny move of the ratio moves every share a little (no
    component jumps on or off, as equal shares over ceil(ratio) components did at each integer)."""
    a, b = shares_for(ratio, 6), shares_for(ratio + step, 6)
    assert all(y >= x - 1e-9 for x, y in zip(a, b))
    c = shares_for(ratio + 1e-5, 6)
    assert max(abs(x - y) for x, y in zip(a, c)) < 0.02


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 12))
def test_uncorrelated_features_are_uncorrelated_under_the_token_weights(seed: int, vocab: int) -> None:
    rng = np.random.default_rng(seed)
    weight = rng.uniform(0.0, 1.0, vocab)
    first = rng.uniform(-1, 1, vocab)
    out = uncorrelated(first, [rng.uniform(-1, 1, vocab) for _ in range(3)], weight)
    w = weight / weight.sum()
    feats = [first, *out]
    for i in range(len(feats)):
        for j in range(i + 1, len(feats)):
            a, b = feats[i] - (w * feats[i]).sum(), feats[j] - (w * feats[j]).sum()
            assert abs((w * a * b).sum()) < 1e-9
    assert all(np.abs(f).max() == pytest.approx(1.0) for f in out)
    assert len(out) <= min(3, vocab - 1)


def test_a_vocabulary_of_two_tokens_has_room_for_one_feature_only() -> None:
    weight = np.array([0.0, 0.0, 1.0, 1.0])
    assert uncorrelated(np.array([0.3, 0.1, -1.0, 1.0]), [np.array([0.5, 0.2, 0.4, -0.9])], weight) == []


def test_the_node_variance_stays_its_factor_and_the_components_their_shares() -> None:
    """Split among its components, a node's target variance (first + further, pooled over positions as the
    loudness calibration measures it) is what its factor gives; each further one is share x the first's,
    the shares those of its factor x its type's held circuit ratio; and the standardised components are
    uncorrelated with the first where the feature alone decides."""
    tokens, mask = token_inputs()
    flat, many = _spec(4)
    slots = [(i // 5, i % 5) for i in range(len(NODES))]
    main = DistractorTargets.fit(many, slots, tokens, mask, mask, causal=True)
    comps = ComponentTargets.fit(main, tokens, mask, mask)
    assert comps is not None and len(comps.node) == sum(len(d.components) for d in many)
    assert component_names(many)[0].endswith("/2")
    ranks = RankReference()
    ranks.held.copy_(torch.tensor([2.2, 3.0]))  # (heads, MLPs)
    shares = comps.shares(ranks)
    first_part = comps.first_shares(shares)
    for i, d in enumerate(many):  # each node's shares: its factor x its type's ratio, within its components
        own = shares[comps.node == i].double()
        wanted = min(max(d.rank_factor * (3.0 if d.node.startswith("m") else 2.2), 1.0), 1 + len(d.components))
        expected = [v if v >= MIN_SHARE else 0.0 for v in shares_for(wanted, 1 + len(d.components))]
        assert own.tolist() == pytest.approx(expected, abs=1e-5)  # under MIN_SHARE: 0, no feature yet
        assert float(first_part[i]) == pytest.approx(1 / (1 + float(own.sum())), rel=1e-5)
    assert bool((shares > 0).any()) and bool((shares == 1).any())
    reference = torch.tensor([2.0, 1.5])
    first = main.scaled(main.standardised(tokens, mask), reference[None], None, first_part)[0]
    scales = main.scales(reference[None], None, first_part)[0][:, None].expand(-1, 4000)
    further = comps.targets(comps.standardised(tokens, mask), scales, shares)
    inputs = mask.clone()
    inputs[:, 0] = False  # BOS: every causal target is its constant there (siit.distractors.bos_quiet)
    var_first = variances(first[..., None], inputs)
    var_further = variances(further[..., None], inputs)
    total = var_first.clone().index_add_(0, comps.node, var_further)
    assert torch.allclose(total, main.wanted_variances(reference[None])[0], rtol=0.02)
    assert torch.allclose(var_further / var_first[comps.node], shares, rtol=0.02, atol=1e-6)
    flat_main = DistractorTargets.fit(flat, slots, tokens, mask, mask, causal=True)
    assert ComponentTargets.fit(flat_main, tokens, mask, mask) is None
    z_first, z_further = main.standardised(tokens, mask), comps.standardised(tokens, mask)
    for e, i in enumerate(comps.node.tolist()):
        if many[i].kind == "previous_token":
            a, b = z_first[i][:, 2:][mask[:, 2:]], z_further[e][:, 2:][mask[:, 2:]]
            assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 0.05


def test_components_without_a_share_leave_the_loss_and_the_check() -> None:
    """A component under MIN_SHARE has share 0 and extend leaves it out: its target would be weighed
    1 / share by the loss, which normalises each target by its variance."""
    tokens, mask = token_inputs()
    _, many = _spec(4)
    slots = [(i // 5, i % 5) for i in range(len(NODES))]
    main = DistractorTargets.fit(many, slots, tokens, mask, mask, causal=True)
    comps = ComponentTargets.fit(main, tokens, mask, mask)
    ranks = RankReference()
    ranks.held.copy_(torch.tensor([1.0, 1.0]))
    shares = comps.shares(ranks)
    assert bool((shares == 0).any()) and not bool(((shares > 0) & (shares < MIN_SHARE)).any())
    B, T, d = 3, tokens.shape[1], 8
    target, pred = torch.zeros(len(many), B, T), torch.zeros(len(many), B, T)
    z = torch.ones(len(comps.node), B, T)
    out_t, out_p = comps.extend(target, pred, z, torch.ones(len(many), B), shares,
                                torch.ones(len(comps.node), B, T, d), torch.ones(len(comps.node), d))
    assert out_t.shape[0] == out_p.shape[0] == len(many) + int((shares > 0).sum())


def test_a_trained_model_s_busy_nodes_write_several_directions(compiled) -> None:
    """Case 33 with up to six components: criterion met (every component with a share has its R²
    judged), the entry records each component's share and R², the busy nodes write about as many
    directions as their shares ask (participation ratio of their outputs' covariance), and the circuit
    (m0 alone) writes neither more nor fewer than every busy node."""
    from eval.core.looks.activations import output_rank
    from siit.look_inputs import look_inputs
    from siit.export import COMPONENTS_NOTE, training_json
    from siit.trainer import train

    result = train(compiled("33"), TrainConfig(seed=0, distractor_components=6))
    assert result.met_criterion
    r2 = result.metrics["distractor_r2_per_node"]
    several = [d for d in result.distractors if d.get("component_shares")]
    live = sum(v > 0 for d in several for v in d["component_shares"])
    assert several and len(r2) == len(result.distractors) + live
    assert all(v >= 0.9 for d in several for v, share in zip(d["component_r2"], d["component_shares"]) if share > 0)
    assert all(v is None for d in several for v, share in zip(d["component_r2"], d["component_shares"]) if share == 0)
    realism = training_json(result)["realism"]
    assert COMPONENTS_NOTE in realism["notes"] and realism["circuit_ratios"]["mlps"] > 1.0
    d = result.evaluator.data
    ranks = output_rank(look_inputs(result.model, d.tokens, d.mask, result.correspondence.aligned, "classification"))
    wanted = {x["node"]: _participation(torch.tensor([1.0, *x.get("component_shares", [])], dtype=torch.float64))
              for x in result.distractors}
    asked, got = (torch.tensor(v, dtype=torch.float64) for v in zip(*[(w, ranks[n]) for n, w in wanted.items()]))
    order = lambda v: v.argsort().argsort().double()  # noqa: E731
    assert float(torch.corrcoef(torch.stack([order(asked), order(got)]))[0, 1]) >= 0.8  # Spearman
    assert float(((got - asked).abs() / asked).median()) <= 0.15
    busy = [ranks[n] for n in wanted]
    assert min(busy) < ranks["m0"] < max(busy)
    assert MAX_COMPONENTS == 6
