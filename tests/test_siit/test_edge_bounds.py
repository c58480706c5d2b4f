"""validation.json's `edge_bounds` (siit.edge_bounds, issue 36): every q/k/v edge outside the circuit
patched alone on siit.effect_bounds' fresh sample, per input length, with the sequence as the unit.
Hand-made models (no training): one whose outputs nothing can move (every effect exactly 0: the
sample resolves the bound) and a random one (its non-circuit edges move outputs), checked against
patching each edge by hand on the same inputs and sources."""

from __future__ import annotations

import json

import pytest
import torch

from eval.core.proportion_bound import upper_bound
from siit.edge_bounds import edge_bounds, edge_changes
from siit.edges import EdgeLayout
from siit.effect_bounds import BOUND, BOUND_N, bound_evaluator
from siit.high_level import as_task
from siit.transformer import Patch, Transformer
from test_effect_bounds import case_33  # noqa: F401  (the fixture: case 33, its setup, a random model)


def _mute(model: Transformer) -> Transformer:
    """A copy whose logits are constant: no patch can change an output."""
    out = Transformer.from_state_dict(model.config, model.state_dict()).eval()
    with torch.no_grad():
        out.unembed.W_U.zero_()
    return out


def test_a_model_nothing_moves_resolves_the_bound_at_every_length(case_33):
    cc, setup, model = case_33
    section = edge_bounds(_mute(model), setup.final_evaluator, cc)
    json.dumps(section, allow_nan=False)  # plain JSON: no NaN, no tensors
    assert section["exact"] is True and section["resolved"] is True
    assert section["max_effect"] == 0.0 and section["max_upper_95"] <= BOUND
    layout = EdgeLayout(model.n_layers, model.n_heads)
    labelled = setup.corr.map_circuit(cc.graph).edges
    assert section["out_of_circuit_edges"] == int(layout.non_circuit(labelled).sum()) > 0
    # causal attention: the padded copy is measured for every shape, and the record says so
    assert section["input_shapes"] == ["padded", "unpadded", "partly_padded"]
    assert section["measured_shapes"] == ["padded"] and "causal" in section["shapes_rule"]
    lengths = range(cc.case.min_seq_len, cc.case.max_seq_len + 1)
    assert sorted(section["by_length"], key=int) == [str(n) for n in lengths]
    assert section["ablations"] == ["resample", "mean"]
    for by_shape in section["by_length"].values():
        assert set(by_shape) == {"padded"} and set(by_shape["padded"]) == {"resample", "mean"}
        for cell in by_shape["padded"].values():
            assert cell["n_sequences"] == BOUND_N and cell["changed_sequences"] == 0 and cell["edge"] is None
            assert cell["upper_95"] == pytest.approx(upper_bound(0, BOUND_N), abs=1e-6)


def test_edges_that_move_outputs_are_seen_and_named(case_33):
    cc, setup, model = case_33
    section = edge_bounds(model, setup.final_evaluator, cc)
    assert section["exact"] is False and section["max_effect"] > BOUND
    worst = section["worst"]
    assert worst["effect"] == section["max_effect"] and worst["changed_sequences"] > 0
    assert worst["ablation"] in ("resample", "mean")
    cells = [c for by_shape in section["by_length"].values() for by_kind in by_shape.values() for c in by_kind.values()]
    assert max(c["effect"] for c in cells) == section["max_effect"]
    sender, reader = worst["edge"].split("->")
    labelled = {(s, d) for s, d in setup.corr.map_circuit(cc.graph).edges}
    assert (sender, reader.split("<")[0]) not in labelled  # a non-circuit edge, by its head-level name


def test_each_edges_changes_equal_patching_it_alone_by_hand(case_33):
    """edge_changes runs edges grouped by their reader's block, from that block on; each must equal
    a whole run that patches that one edge (Patch.edges from the embedding) on the same pairs."""
    cc, setup, model = case_33
    ev = bound_evaluator(setup.final_evaluator, as_task(cc), 20, 5, ["padded"])
    layout = EdgeLayout(model.n_layers, model.n_heads)
    edges = layout.valid().nonzero()
    edges = edges[torch.randperm(edges.shape[0], generator=torch.Generator().manual_seed(1))[:12]]
    got = edge_changes(model, ev, edges, ("resample", "mean"))
    assert torch.equal(edge_changes(model, ev, edges)["resample"], got["resample"])  # stacked or alone: the same
    d = ev.data
    real = d.mask.float()[:, :, None]
    with torch.no_grad():
        acts = model(d.tokens, d.mask, return_acts=True, present=d.present)[1]
        clean = model(d.tokens, d.mask, present=d.present)[0].argmax(-1)
        embedding = model.input_embedding(d.tokens, d.mask)
        # mean ablation: the sender's mean over the sequences where the position is real, at each position
        mean_acts = (acts * real[None, :, :, :, None]).sum(1, keepdim=True) / real.sum(0)[None, None, :, :, None]
        mean_input = (embedding * real).sum(0, keepdim=True) / real.sum(0)[None]
        sources = {"resample": (acts[:, ev.sources], embedding[ev.sources]),
                   "mean": (mean_acts.expand_as(acts), mean_input.expand_as(embedding))}
        none = torch.zeros(len(d), model.n_layers, model.n_heads + 1, dtype=torch.bool)
        for kind, (src, inputs) in sources.items():
            for i, (u, r) in enumerate(edges.tolist()):
                one = torch.zeros(len(d), *layout.shape, dtype=torch.bool)
                one[:, u, r] = True
                patched = model(d.tokens, d.mask, Patch(mask=none, values=src, edges=one, input_values=inputs),
                                present=d.present)[0].argmax(-1)
                assert torch.equal(got[kind][i], (patched != clean) & d.label_mask), (kind, layout.names(one[0]))
            assert got[kind].any()  # some of them move outputs: the comparison is not vacuous


def test_the_card_and_the_cli_say_the_edge_bound(case_33):
    from zoo.card import render_model_card
    from zoo.card_bounds import edge_bound_sentence

    cc, setup, model = case_33
    quiet = edge_bounds(_mute(model), setup.final_evaluator, cc)
    loud = edge_bounds(model, setup.final_evaluator, cc)
    assert edge_bound_sentence(quiet, markdown=False).startswith("exact, resolved at bound 0.0100")
    sentence = edge_bound_sentence(loud, markdown=False)
    assert sentence.startswith("NOT exact") and loud["worst"]["edge"] in sentence
    assert "padded shape stands for every shape" in sentence and "(resample and mean)" in sentence
    assert loud["worst"]["ablation"] in sentence
    # an entry validated before mean ablation was added names its one ablation
    old = {**loud, "ablation": "resample", "worst": {**loud["worst"], "ablation": None}}
    del old["ablations"]
    assert "(resample)" in edge_bound_sentence(old, markdown=False)
    card = render_model_card(name="case-33", config=cc.config, circuit=cc.graph.to_json(),
                             case=cc.case.metadata(), training=None, validation={"edge_bounds": loud})
    assert "Edge-level bound on a fresh sample: **NOT exact**" in card
    assert edge_bound_sentence({"skipped": "32000 non-circuit q/k/v edges > 5000"}).startswith("not measured")
    assert edge_bound_sentence(None) is None and edge_bound_sentence({}) is None
