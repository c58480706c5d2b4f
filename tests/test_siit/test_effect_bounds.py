"""validation.json's `effect_bounds` (siit.effect_bounds, issue 36): the out-of-circuit bound proved on
a fresh sample of BOUND_N sequences per input length, in every input shape (a causal model's padded
copy standing for all), with the sequence as the unit. Hand-made models (no training): one whose out-of-circuit nodes write nothing (every
effect exactly 0: the sample resolves the bound), and the same untouched (they move outputs)."""

from __future__ import annotations

import json

import pytest
import torch

from eval.core.proportion_bound import upper_bound
from siit.config import TrainConfig
from siit.effect_bounds import BOUND, BOUND_N, effect_bounds, stratified_sample
from siit.train_setup import prepare
from siit.initialise import init_weights
from siit.transformer import Transformer
from siit.validation import PARTS, validate_model

SMALL = TrainConfig(n_train=256, n_val=128, batch_size=32)


@pytest.fixture(scope="module")
def case_33(compiled):
    """(compiled case 33, its setup, a seeded random low-level model)."""
    cc = compiled("33")
    setup = prepare(cc, SMALL)
    model = Transformer(setup.low_config).eval()
    init_weights(model, torch.Generator().manual_seed(0))
    return cc, setup, model


def _silenced(model: Transformer, nodes) -> Transformer:
    """A copy of `model` whose `nodes` write nothing to the residual stream."""
    out = Transformer.from_state_dict(model.config, model.state_dict()).eval()
    with torch.no_grad():
        for node in nodes:
            if node.startswith("a"):
                layer, head = (int(x) for x in node[1:].split(".h"))
                out.blocks[layer].attn.W_O[head] = 0.0
            elif node.startswith("m"):
                mlp = out.blocks[int(node[1:])].mlp
                mlp.W_out.zero_(), mlp.b_out.zero_()
    return out


def test_the_sample_has_bound_n_sequences_of_every_length(case_33):
    cc = case_33[0]
    sample = stratified_sample(cc.case, BOUND_N, 123)
    assert sorted(sample) == list(range(cc.case.min_seq_len, cc.case.max_seq_len + 1))
    assert all(len(seqs) == BOUND_N and {len(s) for s in seqs} == {n} for n, seqs in sample.items())
    assert sample == stratified_sample(cc.case, BOUND_N, 123)  # seeded


def test_silent_out_of_circuit_nodes_resolve_the_bound(case_33):
    cc, setup, model = case_33
    quiet = _silenced(model, setup.corr.non_aligned)
    section = effect_bounds(quiet, setup.final_evaluator, cc)
    json.dumps(section, allow_nan=False)  # plain JSON: no NaN, no tensors
    assert section["resolved"] is True and section["exact"] is True
    assert section["max_effect"] == 0.0 and section["max_upper_95"] <= BOUND
    assert section["input_shapes"] == ["padded", "unpadded", "partly_padded"]
    # causal attention: the padded copy stands for every shape (identical: the test below), and says so
    assert section["measured_shapes"] == ["padded"] and "causal" in section["shapes_rule"]
    lengths = range(cc.case.min_seq_len, cc.case.max_seq_len + 1)
    assert sorted(section["by_length"], key=int) == [str(n) for n in lengths]
    for by_shape in section["by_length"].values():
        assert set(by_shape) == {"padded"}
        for by_kind in by_shape.values():
            assert set(by_kind) == {"resample", "mean"}
            for cell in by_kind.values():
                assert cell["n_sequences"] == BOUND_N and cell["changed_sequences"] == 0
                assert cell["upper_95"] >= upper_bound(0, BOUND_N) and cell["node"] is None


def test_nodes_that_write_are_seen_with_the_sequence_as_unit(case_33):
    cc, setup, model = case_33
    section = effect_bounds(model, setup.final_evaluator, cc)
    assert section["exact"] is False and section["max_effect"] > BOUND
    worst = section["worst"]
    assert worst["node"] in setup.corr.non_aligned and worst["effect"] == section["max_effect"]
    cells = [c for s in section["by_length"].values() for k in s.values() for c in k.values()]
    for c in cells:  # within one length the changed positions are at most the changed sequences
        assert c["effect"] <= c["changed_sequences"] / c["n_sequences"] + 1e-9
        assert c["upper_95"] >= c["changed_sequences"] / c["n_sequences"]
    # the node it names does move that length's outputs in that shape and ablation
    cell = section["by_length"][str(worst["length"])][worst["shape"]][worst["ablation"]]
    assert cell["node"] == worst["node"] and cell["changed_sequences"] == worst["changed_sequences"] > 0


def test_under_causal_attention_every_shape_changes_the_same_outputs(case_33):
    """Why a causal model's bounds measure the padded copy only: node by node and ablation by
    ablation, every input shape changes exactly the same labelled positions of the same pairs (a
    random model, whose out-of-circuit nodes move many outputs)."""
    from siit.effect_bounds import _changes, bound_evaluator
    from siit.high_level import as_task

    cc, setup, model = case_33
    assert model.causal
    shapes = ["padded", "unpadded", "partly_padded"]
    ev = bound_evaluator(setup.final_evaluator, as_task(cc), 40, 3, shapes)
    changed = _changes(model, ev, list(ev.correspondence.non_aligned))
    n = len(ev.data) // len(shapes)  # with_shapes: one copy of the sample per shape, in order
    for kind, c in changed.items():
        assert c[:, :n].any()  # not vacuous
        for k in range(1, len(shapes)):
            assert torch.equal(c[:, k * n : (k + 1) * n], c[:, :n]), (kind, shapes[k])
    from zoo.card_bounds import bound_sentence
    assert "padded shape stands for every shape" in bound_sentence(effect_bounds(model, setup.final_evaluator, cc))
    # bidirectional attention attends PAD keys: there each shape is patched
    from types import SimpleNamespace
    from siit.effect_bounds import measured_shapes
    assert measured_shapes(SimpleNamespace(causal=False), shapes) == shapes
    assert measured_shapes(SimpleNamespace(causal=True), ["padded"]) == ["padded"]


def test_validate_model_adds_the_section_given_the_task(case_33):
    cc, setup, model = case_33
    quiet = _silenced(model, setup.corr.non_aligned)
    parts: list[str] = []
    assert "effect_bounds" not in validate_model(quiet, setup.evaluator, stage=parts.append)
    assert parts == [PARTS[0], PARTS[3]]  # what it computes is what it tells a progress display
    parts.clear()
    v = validate_model(quiet, setup.evaluator, cc, stage=parts.append)  # the padded evaluator: one shape
    assert parts == list(PARTS)
    assert v["effect_bounds"]["input_shapes"] == ["padded"] and v["effect_bounds"]["exact"] is True
    assert v["effect_bounds"]["pairing"] == "independent"
