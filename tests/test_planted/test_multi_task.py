"""Multi-task bundles (planted.multi_task, planted.bundles): the high-level model's labels, per-task
strictness by construction, the views, and the training defaults."""

from __future__ import annotations

import pytest
import torch

from bundle_checks import check_strict_by_construction, run_task
from planted import get_planted, planted_names
from planted.bundles import BUNDLES
from planted.causal_model import CausalModel, Node
from planted.multi_task import Bundle, Part
from rasp_programs.case import CaseError
from siit.config import TrainConfig
from zoo.multi_task_entry import training_task
from zoo.train_entry import with_task_defaults

N = 3000


def _run(task, n=N, seed=0):
    return run_task(task, n, seed)


@pytest.fixture(scope="module", params=sorted(BUNDLES))
def bundle(request) -> Bundle:
    return BUNDLES[request.param]()


def test_views_are_listed_and_resolved():
    names = planted_names()
    bundle = BUNDLES["mt-2x4"]()
    assert all(v in names for b in BUNDLES.values() for v in b().view_names)
    assert bundle.view_names[0] == "mt-2x4.rare-feature"  # the main task comes first
    view = get_planted("mt-2x4.lag2")
    assert view.bundle is not None and view.case.id == "mt-2x4.lag2"
    with pytest.raises(CaseError, match="unknown planted model"):
        get_planted("mt-2x4.nothing")


def test_labels_follow_each_tasks_reference(bundle):
    for view in (None, *range(len(bundle.parts))):
        task = bundle.task(view)
        seqs, _, _, labels, values, positions = _run(task)
        assert torch.equal(labels[positions], task.labels(seqs)[positions]), view
        assert values.shape[0] == len(task.graph.nodes)
        if view is not None:  # a view's inputs are its task's tokens only
            prefix = bundle.parts[view].prefix
            assert all(t.startswith(prefix) for seq in seqs for t in seq)


def test_each_view_is_its_part_and_the_bundle_covers_what_it_places(bundle):
    training = bundle.task()
    components = {f"a{layer}.h{h}" for layer in range(bundle.n_layers) for h in range(bundle.n_heads)} | {
        f"m{layer}" for layer in range(bundle.n_layers)}
    placed = {c for p in bundle.parts for c in p.placement.values()}
    assert training.covers_model == (placed == components)
    assert bundle.name == "mt-4x4" or training.covers_model  # only mt-4x4 leaves components to distractors
    seen: list[str] = []
    for k, part in enumerate(bundle.parts):
        view = bundle.task(k)
        assert set(view.graph.nodes) == set(part.placement.values())
        assert not view.covers_model
        corr = view.correspondence(view.low_level_config(training_config_arch()), seed=123)
        assert all(corr.mapping[n] == (n,) for n in view.graph.nodes)  # fixed placement, whatever the seed
        seen += view.graph.nodes
        assert view.encoding == training.encoding  # one vocabulary and unembedding
        assert ("input", "logits") in view.graph.edges  # a task's tokens raise its own answer classes
    assert sorted(seen) == sorted(training.graph.nodes)


def training_config_arch():
    from siit.config import ArchConfig

    return ArchConfig()


def test_other_tasks_nodes_never_move_a_tasks_output(bundle):
    check_strict_by_construction(bundle, N)


def test_every_node_is_busy_on_every_tasks_rows(bundle):
    """A node computes its function on whatever task's values it sees: on every task's rows its
    value varies (busy components are other tasks' circuits, not constant)."""
    training = bundle.task()
    for k in range(len(bundle.parts)):
        _, _, _, _, values, positions = _run(bundle.task(None), seed=3)
        task_rows = _run(bundle.task(k), seed=4)
        vals, pos = training.model.run(task_rows[1], task_rows[2])[1], task_rows[5]
        for i, node in enumerate(training.model.nodes):
            assert vals[i][pos].unique().numel() > 1, f"{node} is constant on {bundle.parts[k].key}'s rows"


def test_bad_placements_are_refused():
    rare = get_planted("rare-feature")
    part = dict(key="a", prefix="a", model=rare.model, reference=rare.reference, n_values=8, description="")
    with pytest.raises(ValueError, match="exactly its nodes"):
        Part(**part, placement={"a0.h0": "a0.h0"})
    with pytest.raises(ValueError, match="one component"):
        Part(**part, placement={"a0.h0": "a0.h1", "m0": "a0.h1"})
    one = Part(**part, placement={"a0.h0": "a0.h0", "m0": "m0"})
    other = Part(**{**part, "key": "b", "prefix": "b"}, placement={"a0.h0": "a0.h1", "m0": "m0"})
    with pytest.raises(ValueError, match="two parts placed on one component"):
        Bundle(name="x", parts=(one, other), n_layers=2, n_heads=4, d_head=4, min_len=3, max_len=6, description="")
    with pytest.raises(ValueError, match="distinct"):
        Bundle(name="x", parts=(one, one), n_layers=2, n_heads=4, d_head=4, min_len=3, max_len=6, description="")
    # a head placed in the layer of its parent MLP cannot read it
    late = Part(**part, placement={"a0.h0": "a1.h0", "m0": "m0"})
    with pytest.raises(ValueError, match="parents|forward order|earlier"):
        Bundle(name="x", parts=(late,), n_layers=2, n_heads=4, d_head=4, min_len=3, max_len=6,
               description="").model()


def test_a_view_trains_its_bundle_without_distractors():
    bundle = BUNDLES["mt-2x4"]()
    view = get_planted("mt-2x4.saturation")
    trained_on = training_task(view)
    assert trained_on.case.id == "mt-2x4" and trained_on.covers_model
    config = with_task_defaults(TrainConfig(), trained_on, lr_given=False)
    assert config.distractors is False and config.strict_edges is False  # node-level: it met so (Bundle.strict_edges)
    assert config.epochs == bundle.epochs == 750 and config.lr == bundle.lr  # a bundle's own budget and lr
    assert with_task_defaults(TrainConfig(epochs=10), trained_on, lr_given=False, epochs_given=True).epochs == 10
    family = get_planted("saturation")
    assert training_task(family) is family
    assert with_task_defaults(TrainConfig(), family, lr_given=False).distractors is True


def test_a_bundle_that_leaves_components_gives_them_distractors():
    """mt-4x4 places 18 tasks' nodes on 20 components: the two left (a3.h2, a3.h3) are out of every
    task's circuit, so its training gives them distractor tasks, while each view trains none."""
    trained_on = training_task(get_planted("mt-4x4.causal-bench"))
    assert trained_on.case.id == "mt-4x4" and not trained_on.covers_model
    config = with_task_defaults(TrainConfig(), trained_on, lr_given=False)
    assert config.distractors is True and config.strict_edges is False
    corr = trained_on.correspondence(trained_on.low_level_config(training_config_arch()), seed=0)
    assert sorted(corr.non_aligned) == ["a3.h2", "a3.h3"]


def test_a_causal_model_with_one_node_still_checks_its_order():
    with pytest.raises(ValueError):
        CausalModel(node_list=(Node(name="m0", parents=("a0.h0",), fn=lambda d, r, x: x, label=""),),
                    first_value_id=1, n_values=2)


def test_answers_stay_in_their_tasks_classes_under_any_interchange(bundle):
    """Each task answers with classes of its own, whatever another task's row an interchange takes a
    value from (so strictness and interchange can both hold, planted.multi_task)."""
    training = bundle.task()
    model, vocab = training.model, training.encoding.output_vocab
    _, src_tokens, src_mask, _, src_values, _ = _run(training, seed=5)
    _, tokens, mask, _, _, positions = _run(training, seed=6)
    prefix = [seq[0][0] for seq in training.case.sample(N, 6)]
    for i in range(len(model.nodes)):
        select = torch.zeros(len(model.nodes), dtype=torch.bool)
        select[i] = True
        out = model.interchange(tokens, mask, src_values, select)
        for row in range(0, N, 7):
            answers = {vocab[c] for c in out[row][positions[row]].tolist()}
            assert all(a[0] == prefix[row] for a in answers)


def test_rows_are_drawn_by_share_and_equal_shares_draw_as_before():
    """Part.share: a part's rows come up in proportion to its share (mt-4x4: by node count); equal
    shares keep the uniform draw every bundle made before shares existed (the same inputs)."""
    import dataclasses

    import numpy as np

    from planted.multi_task import PartSampler

    bundle = BUNDLES["mt-4x4"]()
    seqs = bundle.task().case.sample(20000, 0)
    total = sum(p.share for p in bundle.parts)
    for part in bundle.parts:
        seen = sum(seq[0][0] == part.prefix for seq in seqs) / len(seqs)
        assert abs(seen - part.share / total) < 0.01, part.key
    parts = bundle.parts[:3]
    equal = tuple(dataclasses.replace(p, share=2.0) for p in parts)
    assert PartSampler(equal, 3, 6)(np.random.default_rng(7), 50) == PartSampler(
        tuple(dataclasses.replace(p, share=1.0) for p in parts), 3, 6)(np.random.default_rng(7), 50)
    which = np.random.default_rng(7).integers(0, 3, size=50)  # the draw before shares existed
    drawn = PartSampler(equal, 3, 6)(np.random.default_rng(7), 50)
    assert [parts[int(k)].prefix for k in which] == [seq[0][0] for seq in drawn]
    with pytest.raises(ValueError, match="share"):
        dataclasses.replace(parts[0], share=0.0)
