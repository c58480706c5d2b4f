"""Busy MLPs that read earlier busy heads (siit.busy_reads, TrainConfig.distractor_reads): the draw, the
target's identity, the records, and a trained model whose busy MLP uses the heads it reads."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from siit.busy_components import as_distractors, draw_components
from siit.busy_reads import MAX_READS, draw_reads, layer_of, read_effect
from siit.config import ConfigError, TrainConfig
from siit.distractors import make_distractors, raw_targets
from siit.export import config_from_training_json
from token_inputs import token_inputs

NODES = [f"a{l}.h{h}" for l in range(3) for h in range(4)] + ["m0", "m1", "m2"]


def _spec(reads: int, seed: int = 5, nodes: list[str] = NODES):
    flat = make_distractors(nodes, d_vocab=9, n_ctx=6, causal=True, seed=seed, spread=2.2)
    return flat, draw_reads(flat, reads, seed)


def test_no_reads_leave_every_draw_and_record_as_before() -> None:
    flat, same = _spec(0)
    assert same == flat
    assert all("reads" not in d.to_json() for d in same)
    assert "distractor_reads" not in TrainConfig().to_json()  # old entries' configs compare equal
    config, _ = config_from_training_json({"config": TrainConfig().to_json(), "arch": {"overrides": {}}})
    assert config.distractor_reads == 0


@pytest.mark.parametrize("reads", range(1, MAX_READS + 1))
def test_busy_nodes_read_earlier_busy_heads_and_nothing_else_changes(reads: int) -> None:
    """MLPs read min(reads, n) of the n heads of their block or earlier; heads that copy from `offset`
    back read running-mean heads of earlier blocks; no other node reads; weights ±1/n; every other field
    is the flat draw's; the same seed draws the same reads."""
    flat, spec = _spec(reads)
    assert spec == _spec(reads)[1]
    readers = 0
    for before, d in zip(flat, spec):
        assert dataclasses.replace(d, reads=(), read_weights=()) == before
        if d.kind == "token_position":
            pool = [h for h in flat if h.node.startswith("a") and layer_of(h.node) <= layer_of(d.node)]
        elif d.kind == "previous_token":
            pool = [h for h in flat if h.kind == "running_mean" and layer_of(h.node) < layer_of(d.node)]
        else:
            pool = []
        assert len(d.reads) == min(reads, len(pool)) and {r.node for r in d.reads} <= {h.node for h in pool}
        assert len({r.node for r in d.reads}) == len(d.reads)
        assert all(abs(abs(w) - 1 / len(d.reads)) < 1e-12 for w in d.read_weights)
        assert d.to_json().get("reads", []) == [r.node for r in d.reads]
        readers += bool(d.reads)
    assert readers > 3  # the three MLPs and some heads


def test_an_mlp_reads_the_heads_as_they_read() -> None:
    """An MLP that reads a head that reads carries that head's reads (its target is the chain's)."""
    _, spec = _spec(3)
    by_node = {d.node: d for d in spec}
    nested = [r for d in spec if d.kind == "token_position" for r in d.reads if by_node[r.node].reads]
    assert nested and all(r == by_node[r.node] for r in nested)


def test_readers_spread_their_reads_over_the_heads() -> None:
    """Heads no node reads yet are taken first: a reader takes an already-read head only once every head
    of its pool is read."""
    _, spec = _spec(2)
    seen: dict[str, int] = {}
    for d in [x for x in spec if x.kind == "previous_token"] + [x for x in spec if x.kind == "token_position"]:
        pool = {h.node for h in spec if h.node.startswith("a")} if d.kind == "token_position" else None
        if d.reads and pool is not None:
            unread = [n for n in pool if not seen.get(n) and layer_of(n) <= layer_of(d.node)]
            assert sum(not seen.get(r.node) for r in d.reads) == min(len(d.reads), len(unread))
        for r in d.reads:
            seen[r.node] = seen.get(r.node, 0) + 1


def test_heads_that_fire_at_one_position_are_not_read() -> None:
    flat = make_distractors(NODES, d_vocab=9, n_ctx=6, causal=True, seed=5, spread=2.2, positions="one")
    assert all(d.reads == () for d in draw_reads(flat, 3, 5))  # every head varies at one position only


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), reads=st.integers(1, MAX_READS))
def test_a_reader_s_target_is_its_rule_on_the_sum_of_its_sources(seed: int, reads: int) -> None:
    """An MLP: |sum of its sources' targets - its position code|; a head: that sum `offset` positions back
    (the first input token's where there is none), as it copies a token's feature."""
    _, spec = _spec(reads, seed)
    tokens, mask = token_inputs(200, 6, seed)
    for d in spec:
        if not d.reads:
            continue
        s = sum(w * raw_targets(r, tokens, mask) for r, w in zip(d.reads, d.read_weights))
        if d.kind == "token_position":
            code = torch.tensor(d.position_code, dtype=torch.float32)[: tokens.shape[1]]
            want = (s - code).abs()
        else:
            want = s[:, (torch.arange(tokens.shape[1]) - d.offset).clamp(min=1)]
        assert torch.allclose(raw_targets(d, tokens, mask), want)


def test_a_reader_s_further_components_read_their_token() -> None:
    flat = make_distractors(NODES, d_vocab=9, n_ctx=6, causal=True, seed=5, spread=2.2)
    spec = draw_reads(draw_components(flat, 3, np.array([0.0, 0.0] + [1.0] * 7), 5, 4), 3, 5)
    mlp = next(d for d in spec if d.reads and d.components)
    assert all(c.reads == () and c.read_weights == () for c in as_distractors(mlp))


@pytest.mark.parametrize("bad", [-1, 4, True, 1.5])
def test_config_refuses_a_read_count_out_of_range(bad) -> None:
    with pytest.raises(ConfigError, match="distractor_reads"):
        TrainConfig(distractor_reads=bad)


def test_a_distractor_refuses_reads_it_cannot_compute() -> None:
    _, spec = _spec(2)
    mlp = next(d for d in spec if d.kind == "token_position" and len(d.reads) == 2)
    with pytest.raises(ValueError, match="weights"):
        dataclasses.replace(mlp, read_weights=mlp.read_weights[:1])
    mean = next(d for d in spec if d.kind == "running_mean")
    with pytest.raises(ValueError, match="reads no other node"):
        dataclasses.replace(mean, reads=mlp.reads, read_weights=mlp.read_weights)


def test_a_trained_model_s_readers_use_the_heads_they_read(compiled) -> None:
    """Case 33 with --busy-reads 3: criterion met (every reader's R² judged like every distractor's), the
    entry records what each node reads, and each reader uses those heads (siit.busy_reads.read_effect):
    resampling the heads m1 reads moves the readout of its target by more than 0.8 of its variance (2 if it
    read nothing else; the default model's m1, which computes on its token, moves 0.12 under the same
    heads), and for every reader the head it uses most moves it by more than 0.2 and more than any head it
    does not read (a head reading a running mean can also average the tokens itself, so a head reader
    moves less than an MLP, docs/results.md)."""
    from siit.train_setup import prepare
    from siit.trainer import train

    config = TrainConfig(seed=0, distractor_reads=3)
    result = train(compiled("33"), config)
    assert result.met_criterion
    recorded = {d["node"]: d for d in result.distractors}
    targets = prepare(compiled("33"), config).targets
    readers = [(i, x) for i, x in enumerate(targets.distractors) if x.reads]
    assert {x.kind for _, x in readers} == {"token_position", "previous_token"}  # m1 and heads of block 1
    d = result.evaluator.data
    z = targets.standardised(d.tokens, d.mask)
    heads = [x.node for x in targets.distractors if x.node.startswith("a")]
    for i, x in readers:
        assert recorded[x.node]["reads"] == [r.node for r in x.reads] and recorded[x.node]["r2"] >= 0.9
        effect = lambda nodes: read_effect(result.model, d.tokens, d.mask, x.node, z[i], nodes)  # noqa: E731
        read = [r.node for r in x.reads]
        others = [n for n in heads if n not in read and layer_of(n) < layer_of(x.node) + x.node.startswith("m")]
        if x.kind == "token_position":
            assert effect(read) > 0.8
        most = max(effect([n]) for n in read)
        assert most > 0.2 and most > max(effect([n]) for n in others), x.node
