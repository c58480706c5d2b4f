"""Planted models: the high-level causal model equals its label function, every node matters,
the CLI lists / shows them (training a test-size model: tests/test_zoo/test_planted_entry.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from planted import get_planted, planted_names
from planted.case_bundles import PREFIX as CASE_BUNDLE
from planted.causal_bench import MAX_LEN, MIN_LEN, N_VALUES
from planted.failure_modes import FAMILIES
from siit.config import ArchConfig
from siit.data import inert_high_nodes, make_dataset, pair_sources, step_generator
from siit.high_level import HighLevelModel, HighLevelTask, selection_rows
from zoo.cli import main

NAMES = [n for n in planted_names() if not n.startswith(CASE_BUNDLE)]
"""The hand-written models (a case bundle's views wrap a compiled case: tests/test_planted/test_case_bundles.py)."""
BENCH = [n for n in NAMES if n.startswith("causal-bench-")]
SEQS = st.lists(st.integers(0, N_VALUES - 1), min_size=MIN_LEN, max_size=MAX_LEN).map(tuple)


@st.composite
def ioi_sentences(draw) -> tuple[str, ...]:
    """Any template, ABBA or BABA, any two distinct names: independent of planted.ioi.sample."""
    from planted.ioi import NAMES as PEOPLE, TEMPLATES

    io, s = draw(st.lists(st.sampled_from(PEOPLE), min_size=2, max_size=2, unique=True))
    a, b = (io, s) if draw(st.booleans()) else (s, io)
    return tuple(w.format(A=a, B=b, S=s) for w in draw(st.sampled_from(TEMPLATES)))


def inputs(name: str):
    if name == "ioi":
        return ioi_sentences()
    task = get_planted(name)
    vocab = task.case.vocab
    if task.bundle is not None:  # a multi-task view's inputs are its own task's tokens (planted.multi_task)
        vocab = task.bundle.parts[task.bundle.view_names.index(name)].tokens()
    return SEQS if vocab == tuple(range(N_VALUES)) else st.lists(
        st.sampled_from(vocab), min_size=MIN_LEN, max_size=MAX_LEN).map(tuple)


def _encode(task, seqs):
    tokens, mask = task.encoding.encode(seqs)
    labelled = mask.bool().clone()
    labelled[:, 0] = False
    return tokens, mask, labelled


@settings(max_examples=80, deadline=None)
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_high_level_outputs_equal_the_label_function(data, name) -> None:
    task = get_planted(name)
    seqs = data.draw(st.lists(inputs(name), min_size=1, max_size=8))
    tokens, mask, labelled = _encode(task, seqs)
    labels, values = task.high_level().run(tokens, mask)
    assert values.shape == (len(task.high_level().nodes), len(seqs), task.encoding.n_ctx)
    assert torch.equal(labels[labelled], task.labels(seqs)[labelled])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_interchange_takes_the_selected_nodes_from_the_source(data, name) -> None:
    task = get_planted(name)
    base, source = data.draw(inputs(name)), data.draw(inputs(name))
    model = task.high_level()
    tokens, mask, labelled = _encode(task, [base])
    src_tokens, src_mask, _ = _encode(task, [source])
    clean, _ = model.run(tokens, mask)
    src_labels, src_values = model.run(src_tokens, src_mask)
    n = len(model.nodes)
    nothing = model.interchange(tokens, mask, src_values, torch.zeros(n, dtype=torch.bool))
    assert torch.equal(nothing, clean)
    output_node = selection_rows(n)[-1]  # the output node from the source: the source's output
    assert torch.equal(model.interchange(tokens, mask, src_values, output_node)[labelled], src_labels[labelled])


@pytest.mark.parametrize("name", NAMES)
def test_every_planted_node_changes_the_output_under_some_interchange(name) -> None:
    task = get_planted(name)
    assert isinstance(task, HighLevelTask) and isinstance(task.high_level(), HighLevelModel)
    model = task.high_level()
    data = make_dataset(task, model, 512, seed=1)
    sources = pair_sources(data.lengths, torch.arange(len(data)), "source_not_shorter", step_generator(0, -2))
    n = len(model.nodes)
    # a failure-mode model may hold nodes whose interchange alone never changes the output by design
    # (cancellation's carry, redundancy's copies: tests/test_planted/test_failure_modes.py); every
    # other node, and every joint group, changes the output
    inert_alone = list(FAMILIES.get(task.failure_mode or "", {}).get("inert_alone", ()))
    assert inert_high_nodes(data, model, selection_rows(n), model.nodes, sources, "classification") == inert_alone
    corr = task.correspondence(task.low_level_config(ArchConfig()), 0)
    joint = list(corr.interventions[n:])
    assert not joint or inert_high_nodes(data, model, corr.selects()[n:], joint, sources, "classification") == []
    sizes = {"ioi": 3, "rare-feature": 2, "cancellation": 3, "saturation": 2, "redundancy": 4,
             "distribution-shift": 3, "large-circuit": 31}
    if task.bundle is not None:  # a multi-task view: its own task's nodes
        sizes[name] = len(task.bundle.parts[task.bundle.view_names.index(name)].placement)
    assert n == sizes.get(name, 5) and task.graph.nodes == model.nodes


def test_ioi_generator_yields_its_templates_with_distinct_subject_and_object() -> None:
    import numpy as np

    from planted.ioi import NAMES as PEOPLE, TEMPLATES, reference

    task = get_planted("ioi")
    seqs = task.case.sample(600, seed=4)
    kinds = set()
    for seq in seqs:
        names = [w for w in seq if w in PEOPLE]
        assert len(names) == 3 and len(set(names)) == 2  # IO once, S twice
        io, s = names[0] if names[0] != names[2] else names[1], names[2]
        assert io != s and reference(seq)[-1] == io and seq[-1] == "to"
        template = next(t for t in TEMPLATES if len(t) == len(seq) and all(
            w == x or w.startswith("{") for w, x in zip(t, seq)))
        kinds.add((TEMPLATES.index(template), "ABBA" if names[0] == io else "BABA"))
    assert kinds == {(t, k) for t in range(len(TEMPLATES)) for k in ("ABBA", "BABA")}
    assert task.case.sample(5, seed=1) == task.case.sample(5, seed=1) != task.case.sample(5, seed=2)
    assert np.unique([s[-1] for s in seqs]).tolist() == ["to"]


def test_scales_place_the_circuit_as_the_paper_says() -> None:
    four = get_planted("causal-bench-4x4")
    assert four.graph.nodes == ("a0.h0", "a0.h1", "m1", "a2.h0", "m3")
    assert get_planted("causal-bench-2x2").graph.nodes == ("a0.h0", "a0.h1", "m0", "a1.h0", "m1")
    from siit.config import ArchConfig

    for name, size in (("causal-bench-6x6", 6), ("causal-bench-12x12", 12)):
        cfg = get_planted(name).low_level_config(ArchConfig())
        assert (cfg["n_layers"], cfg["n_heads"]) == (size, size)


def test_show_unknown_planted_model_is_one_line_exit_2(capsys) -> None:
    code = main(["show", "planted", "nope"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "unknown planted model 'nope'" in err and "causal-bench-4x4" in err


def test_list_and_show_planted(capsys) -> None:
    assert main(["list", "planted"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in NAMES)
    assert main(["show", "planted", "causal-bench-4x4"]) == 0
    out = capsys.readouterr().out
    assert "route" in out and "d_model 16" in out and "m3->logits" in out


def test_causal_model_refuses_a_graph_no_transformer_can_hold() -> None:
    from planted.causal_model import CausalModel, Node

    copy = lambda d, r, *p: d  # noqa: E731
    with pytest.raises(ValueError, match="forward order"):
        CausalModel(node_list=(Node(name="m1", parents=(), fn=copy, label=""),
                               Node(name="a0.h0", parents=(), fn=copy, label="")), first_value_id=1, n_values=5)
    with pytest.raises(ValueError, match="earlier layers"):
        CausalModel(node_list=(Node(name="a0.h0", parents=(), fn=copy, label=""),
                               Node(name="a0.h1", parents=("a0.h0",), fn=copy, label="")), first_value_id=1,
                    n_values=5)


def test_ioi_weighs_the_answer_token_x10_in_iit_and_siit_and_records_it() -> None:
    """InterpBench's IOI loss: the last token's IIT / SIIT losses up-weighted x10 (a weighted mean
    over label positions); every other planted model and every case weighs positions alike."""
    from siit.config import TrainConfig
    from siit.export import training_json
    from siit.losses import last_position_weights, output_loss
    from siit.trainer import train

    assert get_planted("ioi").last_position_weight == 10.0
    assert all(get_planted(n).last_position_weight == 1.0 for n in planted_names() if n != "ioi")
    lengths = torch.tensor([3, 5, 1])
    w = last_position_weights(lengths, 7, 10.0)
    assert w.shape == (3, 7) and w[0, 3] == w[1, 5] == w[2, 1] == 10.0 and w.sum() == 3 * 7 + 3 * 9
    gen = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(3, 7, 5, generator=gen), torch.randint(0, 5, (3, 7), generator=gen)
    label_mask = torch.arange(7)[None] <= lengths[:, None]
    label_mask[:, 0] = False  # BOS carries no label
    plain = output_loss(logits, targets, label_mask, "classification")
    assert torch.allclose(output_loss(logits, targets, label_mask, "classification", torch.ones(3, 7)), plain)
    each = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # [3, 7]
    by_hand = (each * w)[label_mask].sum() / w[label_mask].sum()
    assert torch.allclose(output_loss(logits, targets, label_mask, "classification", w), by_hand)
    assert not torch.allclose(by_hand, plain)
    result = train(get_planted("ioi"), TrainConfig(epochs=1, n_train=128, n_val=64, batch_size=64, eval_every=1))
    assert training_json(result)["loss"]["last_position_weight"] == 10.0
    other = train(get_planted("causal-bench-2x2"), TrainConfig(epochs=1, n_train=128, n_val=64, batch_size=64,
                                                                eval_every=1))
    assert "loss" not in training_json(other)
    assert training_json(other)["compute"]["torch_threads"] == torch.get_num_threads()  # bits depend on it


def test_deep_causal_bench_models_train_at_their_own_learning_rate() -> None:
    """10x10 diverged at the trainer's default lr; `zoo train planted` takes the model's own unless
    --lr is given, and nothing else changes."""
    from siit.config import TrainConfig
    from zoo.train_entry import with_task_defaults

    default = TrainConfig()
    for name in planted_names():
        task = get_planted(name)
        deep = name in ("causal-bench-10x10", "causal-bench-12x12")
        own = 0.005 if deep else (task.bundle.lr if task.bundle is not None else None)  # a bundle's own lr
        assert task.lr == own, name
        config = with_task_defaults(default, task, lr_given=False)
        assert config.lr == (own or default.lr)
        # the failure-mode models and the views of a bundle that says so also train edge-exact by default
        # (planted.multi_task.Bundle.strict_edges); a bundle has its own budget and training set size
        edges = task.failure_mode is not None or (task.bundle is not None and task.bundle.strict_edges)
        epochs = task.bundle.epochs if task.bundle is not None else default.epochs
        n_train = (task.bundle.n_train if task.bundle is not None else None) or default.n_train
        # the wide large-circuit model takes the wide-model step unless --(no-)lean-activations says otherwise
        lean = name == "large-circuit"
        # the failure-mode families keep flat busy targets (planted.failure_modes._task); the rest the default
        profile = 0.0 if task.failure_mode is not None else default.distractor_profile
        assert config == TrainConfig(lr=config.lr, strict_edges=edges or default.strict_edges, epochs=epochs,
                                     n_train=n_train, lean_activations=lean, distractor_profile=profile), name
        assert with_task_defaults(TrainConfig(lr=0.02), task, lr_given=True).lr == 0.02
        assert with_task_defaults(default, task, lr_given=False, strict_edges_given=True) == TrainConfig(
            lr=config.lr, epochs=epochs, n_train=n_train, lean_activations=lean, distractor_profile=profile)
        assert not with_task_defaults(default, task, lr_given=False, lean_given=True).lean_activations
    with pytest.raises(ValueError, match="lr must be a positive number"):
        dataclasses.replace(get_planted("causal-bench-2x2"), lr=0.0)
