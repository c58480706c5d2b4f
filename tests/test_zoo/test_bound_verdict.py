"""The node-level bound's verdict (zoo.train_entry.with_bound_verdict, issue 36): an entry whose
fresh-sample `effect_bounds` (siit.effect_bounds) sees an out-of-circuit node above the bound at
some length fails with a message naming it; one whose sample sees nothing above the bound but
cannot resolve it passes, and its card says "not resolved". The sections are computed by
effect_bounds itself on case 33's inputs, with the changes of one node made by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import siit.effect_bounds as effect_bounds_module
from siit.config import TrainConfig
from siit.data import SHAPES
from siit.effect_bounds import BOUND_N, effect_bounds
from siit.train_setup import prepare
from siit.transformer import Transformer
from zoo.card import render_model_card
from zoo.card_bounds import bound_sentence
from zoo.train_entry import with_bound_verdict

MOVED = 6  # of BOUND_N = 300 sequences: 2%
LENGTH, SHAPE = 3, "padded"  # case 33 is causal: its bound patches the padded copy (siit.effect_bounds.measured_shapes)


@pytest.fixture(scope="module")
def setup_33(compiled):
    cc = compiled("33")
    setup = prepare(cc, TrainConfig(n_train=256, n_val=128, batch_size=32))
    return cc, setup, Transformer(setup.low_config).eval()


def _section(cc, setup, model, monkeypatch, *, every_position: bool) -> dict:
    """effect_bounds where the first out-of-circuit node, under resample ablation only, changes
    MOVED sequences of length LENGTH in SHAPE: at every labelled position, or at the first only."""
    def changes(model, ev, outside):
        d, lm = ev.data, ev.data.label_mask
        out = {k: torch.zeros(len(outside), *lm.shape, dtype=torch.bool) for k in ("resample", "mean")}
        rows = ((d.lengths == LENGTH) & (d.shape_ids == SHAPES.index(SHAPE))).nonzero().flatten()[:MOVED]
        out["resample"][0, rows] = lm[rows] if every_position else lm[rows] & (torch.arange(lm.shape[1]) == 1)
        return out

    monkeypatch.setattr(effect_bounds_module, "_changes", changes)
    return effect_bounds(model, setup.final_evaluator, cc)


@dataclasses.dataclass(frozen=True)
class _Result:
    met_criterion: bool
    config: TrainConfig = TrainConfig()


def test_a_node_moving_two_percent_of_one_length_fails_the_entry(setup_33, monkeypatch, capsys):
    cc, setup, model = setup_33
    section = _section(cc, setup, model, monkeypatch, every_position=True)
    json.dumps(section, allow_nan=False)
    node = setup.corr.non_aligned[0]
    assert section["exact"] is False and section["resolved"] is False
    assert section["worst"] == {"node": node, "length": LENGTH, "shape": SHAPE, "ablation": "resample",
                                "effect": MOVED / BOUND_N, "changed_sequences": MOVED, "n_sequences": BOUND_N,
                                "upper_95": section["worst"]["upper_95"]}
    assert section["worst"]["upper_95"] > MOVED / BOUND_N
    assert with_bound_verdict(_Result(True), {"effect_bounds": section}).met_criterion is False
    err = capsys.readouterr().err
    assert f"node {node} moves 0.02" in err and f"length {LENGTH}" in err and SHAPE in err
    assert with_bound_verdict(_Result(False), {"effect_bounds": section}).met_criterion is False
    assert with_bound_verdict(_Result(True), {}).met_criterion is True  # entries without the section
    # an IIT-only or natural model claims no node-level bound
    natural = TrainConfig(iit_weight=0.0, strict_weight=0.0)
    assert with_bound_verdict(_Result(True, natural), {"effect_bounds": section}).met_criterion is True


def test_an_effect_within_the_bound_that_the_sample_cannot_resolve_passes_as_not_resolved(
        setup_33, monkeypatch, compiled):
    cc, setup, model = setup_33
    section = _section(cc, setup, model, monkeypatch, every_position=False)
    assert section["max_effect"] == round(MOVED / (BOUND_N * LENGTH), 6) <= section["bound"]
    assert section["exact"] is True and section["resolved"] is False
    assert with_bound_verdict(_Result(True), {"effect_bounds": section}).met_criterion is True
    assert "not resolved" in bound_sentence(section, markdown=False)
    card = render_model_card(name="case-33", config=cc.config, circuit=cc.graph.to_json(),
                             case=cc.case.metadata(), training=None, validation={"effect_bounds": section})
    assert "Out-of-circuit bound on a fresh sample: **exact**, **not resolved**" in card


def test_a_resolved_section_says_so(setup_33, monkeypatch):
    cc, setup, model = setup_33
    monkeypatch.setattr(effect_bounds_module, "_changes", lambda model, ev, outside: {
        k: torch.zeros(len(outside), *ev.data.label_mask.shape, dtype=torch.bool) for k in ("resample", "mean")})
    section = effect_bounds(model, setup.final_evaluator, cc)
    assert section["resolved"] is True and section["exact"] is True
    assert bound_sentence(section, markdown=False).startswith("exact, resolved at bound 0.0100")
