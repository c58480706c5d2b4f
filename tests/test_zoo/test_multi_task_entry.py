"""A multi-task view trained as `zoo train planted` trains it (test size, a tiny bundle): the weights
are trained on every task's rows, and the entry records every task's ground truth, validated like
its own (IIA, SIIA, per-node effects), the looks on every task's inputs, and the card's table."""

from __future__ import annotations

import pytest
import torch

from planted.bundles import COPY_ANSWERS, _copy_model, _copy_reference, _first, _second
from planted.causal_model import CausalModel, Node
from planted.multi_task import Bundle, Part


def _shift(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return (digits + 1) % 5


def tiny_bundle() -> Bundle:
    shift = CausalModel(node_list=(Node(name="m0", parents=(), fn=_shift, reads_input=True, label="y = x_i + 1"),),
                        first_value_id=1, n_values=5)
    parts = (
        Part(key="shift", prefix="s", model=shift, placement={"m0": "m0"},
             reference=lambda s: [(x + 1) % 5 for x in s], n_values=5, description="y = x_i + 1 (mod 5)."),
        Part(key="first", prefix="f", model=_copy_model("first", _first, "y = x_1"), placement={"a0.h0": "a0.h0"},
             reference=_copy_reference(1, 2), n_values=5, description="y = x_1 from position 2 on."),
        Part(key="second", prefix="n", model=_copy_model("second", _second, "y = x_2"), placement={"a0.h0": "a0.h1"},
             reference=_copy_reference(2, 3), n_values=5, description="y = x_2 from position 3 on."),
    )
    return Bundle(name="mt-tiny", parts=parts, n_layers=1, n_heads=2, d_head=8, min_len=3, max_len=5,
                  description="Three tasks in one layer (test size).")


@pytest.fixture(scope="module")
def trained():
    from siit.config import ArchConfig, TrainConfig
    from siit.trainer import train
    from zoo.multi_task_entry import training_task, validate_view
    from zoo.train_entry import with_task_defaults

    bundle = tiny_bundle()
    view = bundle.task(0)
    trained_on = training_task(view)
    config = with_task_defaults(TrainConfig(n_val=128, epochs=50), trained_on, lr_given=False)
    result = train(trained_on, config, ArchConfig())
    return bundle, view, result, *validate_view(result, view, torch.device("cpu"))


def test_the_bundle_trains_on_every_tasks_rows_without_distractors(trained):
    bundle, _, result, _, _ = trained
    assert COPY_ANSWERS == 8
    assert not result.config.distractors and result.distractors == []
    assert set(result.correspondence.aligned) == {"a0.h0", "a0.h1", "m0"}  # every component is some task's
    prefixes = {seq[0][0] for seq in result.evaluator.data.seqs}
    assert prefixes == {p.prefix for p in bundle.parts}


def test_every_task_is_validated_like_the_entrys_own(trained):
    bundle, _view, result, view_result, validation = trained
    assert view_result.correspondence.aligned == ("m0",)  # the entry's ground truth is its own task's circuit
    assert all(seq[0].startswith("s") for seq in view_result.evaluator.data.seqs)
    assert {r["node"] for r in validation["node_effects"] if r["in_circuit"]} == {"m0"}
    tasks = validation["tasks"]
    assert tasks["bundle"] == "mt-tiny" and tasks["main"] == "mt-tiny.shift"
    assert list(tasks["views"]) == list(bundle.view_names)
    for name, row in tasks["views"].items():
        k = bundle.view_names.index(name)
        assert row["circuit"] == list(bundle.parts[k].placement.values())
        for key in ("met_criterion", "accuracy", "iia_min", "siia_min", "max_out_of_circuit_effect",
                    "effect_bounds_exact", "edges_exact", "edge_bounds_exact"):
            assert key in row, (name, key)
        # a view can only have met what the bundle met
        assert not row["met_criterion"] or result.met_criterion
    assert tasks["views"]["mt-tiny.shift"]["met_criterion"] == view_result.met_criterion
    mixed = validation["realism"]["battery_all_tasks"]
    assert mixed["looks"] and "every task" in mixed["inputs"]


def test_the_card_shows_every_task(trained, tmp_path):
    from zoo.train_entry import write_entry_files

    _, view, _, view_result, validation = trained
    dest = write_entry_files(tmp_path / "planted-mt-tiny.shift", view, result=view_result, validation=validation,
                             command=["zoo", "train", "planted", "mt-tiny.shift"])
    card = (dest / "README.md").read_text()
    assert "Multi-task model" in card and "`mt-tiny.first`" in card and "`mt-tiny.second`" in card
    assert "edges exact per length" in card
    assert "on every task's inputs" in card
    assert "squashed" not in card  # no claim about distractor-less busy nodes: they are other tasks' circuits


def test_training_stops_only_when_every_task_meets_the_criterion_on_its_own_rows(trained):
    bundle, _, result, _, _ = trained
    last = result.history[-1]
    assert last["checked_on"] == "views" and set(last["metrics"]["views"]) == set(bundle.view_names)
    if result.met_criterion:  # the pooled check alone weighs a task's own interchanges one in three
        assert all(v["met"] for v in last["metrics"]["views"].values())
    for record in result.history:
        views = record["metrics"].get("views")
        assert not record["met_criterion"] or (views and all(v["met"] for v in views.values()))


def test_strictness_rows_patch_other_tasks_nodes_and_edges_only():
    """siit.train_step on a bundle: each strictness row ablates nodes and patches edges outside its
    own task's circuit (its view's), never its own."""
    from siit.config import ArchConfig, TrainConfig
    from siit.data import step_generator
    from siit.edges import EdgeLayout
    from siit.train_setup import prepare
    from siit.train_step import _strict_mask, _strictness_draws

    bundle = tiny_bundle()
    s = prepare(bundle.task(), TrainConfig(n_train=256, n_val=64, strict_edges=True, distractors=False), ArchConfig())
    tokens = s.train_set.tokens[:64]
    task = s.high.row_task_index(tokens)
    mask = _strict_mask(torch.stack([v.non_aligned for v in s.views])[task], 64, "half", step_generator(0, 0))
    edges, _ = _strictness_draws(s, 64, step_generator(0, 1), None, task)
    layout = EdgeLayout(s.low_config["n_layers"], s.low_config["n_heads"])
    for row in range(64):
        view = s.views[int(task[row])]
        own = {s.corr.low.slot(n) for n in view.corr.aligned}
        assert not any(mask[row][slot] for slot in own)
        assert not (edges[row] & ~view.non_circuit_edges).any()
        names = {f"{a}->{b}" for a, b in layout.names(edges[row])}
        assert "input->logits" not in names  # the direct path is in every task's circuit
    assert mask.any() and edges.any()


def test_all_views_writes_every_views_entry_from_one_training(trained, tmp_path, monkeypatch):
    """`zoo train planted <view> --all-views`: one training (here the fixture's, not run again), one
    entry per task, each with that task's circuit and validation and the same weights."""
    import siit.trainer
    import zoo.train_entry as te
    from siit.config import ArchConfig, TrainConfig
    from zoo.artifact import read_entry

    bundle, view, result, _, validation = trained
    monkeypatch.setattr(te, "compiled_task", lambda root, case: view)
    monkeypatch.setattr(siit.trainer, "train", lambda *a, **k: result)
    options = te.TrainOptions(config=TrainConfig(n_val=128, epochs=50), arch=ArchConfig(), root=str(tmp_path),
                              all_views=True)
    dest = te.destination(str(tmp_path), None, view.case)
    out = te.train_entry(view.case, options, dest, command=["zoo", "train", "planted", "mt-tiny.shift", "--all-views"])
    assert set(out.other_views) == {"mt-tiny.first", "mt-tiny.second"}
    assert set(out.summary["other_views"]) == set(out.other_views)
    weights = read_entry(out.dest).data["model.safetensors"]
    for name, (path, met) in out.other_views.items():
        assert path == tmp_path / "entries" / f"planted-{name}"
        entry = read_entry(path)
        part = bundle.parts[bundle.view_names.index(name)]
        assert entry.json("circuit.json")["nodes"] == list(part.placement.values())
        assert entry.data["model.safetensors"] == weights  # one model, several benchmark entries
        own = entry.json("validation.json")
        assert own["tasks"] == validation["tasks"]  # every entry lists every task's figures
        assert met == own["tasks"]["views"][name]["met_criterion"]
        assert {r["node"] for r in own["node_effects"] if r["in_circuit"]} == set(part.placement.values())
        assert "--all-views" in entry.json("training.json")["command"]


@pytest.mark.parametrize("argv, message", [
    (["planted", "mt-2x2.rare-feature", "--all-views", "--out", "X"], "does not take --out"),
    (["planted", "saturation", "--all-views"], "is not one"),
    (["case", "33", "--all-views"], "is not one"),
    (["--all", "--all-views"], "not --all"),
])
def test_all_views_is_refused_where_it_does_not_apply(argv, message, tmp_path, capsys):
    from zoo.cli import main

    code = main(["train", *argv, "--root", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not (tmp_path / "entries").exists() or not any((tmp_path / "entries").iterdir())


def test_the_bundles_train_node_level_on_their_own_training_sets_by_default():
    """The bundle's defaults are the ones it met its criterion with (planted.bundles.mt_2x2); the
    command line still overrides them."""
    from planted import get_planted
    from siit.config import TrainConfig
    from zoo.multi_task_entry import training_task
    from zoo.train_entry import with_task_defaults

    trained_on = training_task(get_planted("mt-2x2.first"))
    config = with_task_defaults(TrainConfig(), trained_on, lr_given=False)
    assert (config.strict_edges, config.n_train, config.epochs, config.lr) == (False, 8192, 750, 0.003)
    given = with_task_defaults(TrainConfig(n_train=2048, strict_edges=True), trained_on, lr_given=False,
                               strict_edges_given=True, n_train_given=True)
    assert (given.strict_edges, given.n_train) == (True, 2048)
    wide = with_task_defaults(TrainConfig(), training_task(get_planted("mt-2x4.first")), lr_given=False)
    assert (wide.strict_edges, wide.n_train) == (False, 32768)
