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


def test_components_change_only_the_components_and_span_the_ratios() -> None:
    flat, many = _spec(4)
    for a, b in zip(flat, many):
        assert dataclasses.replace(b, components=(), shares=()) == a
        assert len(b.components) == len(b.shares) <= 3
        assert all(MIN_SHARE <= s <= 1 for s in b.shares)
    ratios = [(1 + sum(d.shares)) ** 2 / (1 + sum(s * s for s in d.shares)) for d in many]
    assert min(ratios) == 1.0 and max(ratios) > 3.0  # stratified over [1, 4]: one-scalar nodes and wide ones
    assert many == _spec(4)[1]  # reproducible from the seed
    assert TrainConfig(distractor_components=4).to_json()["distractor_components"] == 4


def test_heads_carry_no_more_components_than_their_width() -> None:
    _, narrow = _spec(4, d_head=2)
    assert all(len(d.shares) <= 1 for d in narrow if d.node.startswith("a"))
    assert max(len(d.shares) for d in narrow if d.node.startswith("m")) >= 1


@pytest.mark.parametrize("bad", [0, 5, True, 2.0])
def test_config_refuses_a_component_count_out_of_range(bad) -> None:
    with pytest.raises(ConfigError, match="distractor_components"):
        TrainConfig(distractor_components=bad)


@settings(max_examples=50, deadline=None)
@given(st.floats(1.0, 4.0), st.integers(2, 4))
def test_shares_give_the_participation_ratio_asked_for(ratio: float, k: int) -> None:
    ratio = min(ratio, k)
    shares = shares_for(ratio, k)
    eig = torch.tensor([1.0, *shares], dtype=torch.float64)
    assert len(shares) == k - 1 and all(0 <= s <= 1 for s in shares)
    assert _participation(eig) == pytest.approx(ratio, abs=1e-6)


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
    loudness calibration measures it) is what its factor gives; each further one is share x the first's;
    and the standardised components are uncorrelated with the first where the feature alone decides."""
    tokens, mask = token_inputs()
    flat, many = _spec(4)
    slots = [(i // 5, i % 5) for i in range(len(NODES))]
    main = DistractorTargets.fit(many, slots, tokens, mask, mask, causal=True)
    comps = ComponentTargets.fit(main, tokens, mask, mask)
    assert comps is not None and len(comps.node) == sum(len(d.shares) for d in many)
    assert component_names(many)[0].endswith("/2")
    reference = torch.tensor([2.0, 1.5])
    first = main(tokens, mask, reference)
    further = comps.targets(comps.standardised(tokens, mask), main.scales(reference[None])[0][:, None].expand(-1, 4000))
    inputs = mask.clone()
    inputs[:, 0] = False  # BOS: every causal target is its constant there (siit.distractors.bos_quiet)
    var_first = variances(first[..., None], inputs)
    var_further = variances(further[..., None], inputs)
    total = var_first.clone().index_add_(0, comps.node, var_further)
    assert torch.allclose(total, main.wanted_variances(reference[None])[0], rtol=0.02)
    shares = comps.ratio ** 2
    assert torch.allclose(var_further / var_first[comps.node], shares, rtol=0.02)
    flat_main = DistractorTargets.fit(flat, slots, tokens, mask, mask, causal=True)
    assert ComponentTargets.fit(flat_main, tokens, mask, mask) is None
    z_first, z_further = main.standardised(tokens, mask), comps.standardised(tokens, mask)
    for e, i in enumerate(comps.node.tolist()):
        if many[i].kind == "previous_token":
            a, b = z_first[i][:, 2:][mask[:, 2:]], z_further[e][:, 2:][mask[:, 2:]]
            assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 0.05


def test_a_trained_model_s_busy_nodes_write_several_directions(compiled) -> None:
    """Case 33 with up to four components: criterion met (every component's R² included), the entry
    records each component's share and R², and the busy nodes given several components write more than
    one direction (participation ratio of their outputs' covariance), the one-scalar ones about one."""
    from eval.core.looks.activations import output_rank
    from siit.look_inputs import look_inputs
    from siit.export import COMPONENTS_NOTE, training_json
    from siit.trainer import train

    result = train(compiled("33"), TrainConfig(seed=0, distractor_components=4))
    assert result.met_criterion
    r2 = result.metrics["distractor_r2_per_node"]
    several = [d for d in result.distractors if d.get("component_shares")]
    assert several and len(r2) == len(result.distractors) + sum(len(d["component_shares"]) for d in several)
    assert all(min(d["component_r2"]) >= 0.9 for d in several)
    assert COMPONENTS_NOTE in training_json(result)["realism"]["notes"]
    d = result.evaluator.data
    ranks = output_rank(look_inputs(result.model, d.tokens, d.mask, result.correspondence.aligned, "classification"))
    wide = [x["node"] for x in several if len(x["component_shares"]) >= 2]
    one = [x["node"] for x in result.distractors if not x.get("component_shares")]
    assert wide and min(ranks[n] for n in wide) > 1.5
    assert max(ranks[n] for n in one) < 1.3
    assert MAX_COMPONENTS == 4
