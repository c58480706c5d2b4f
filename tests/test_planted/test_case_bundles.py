"""Case bundles (planted.case_bundles, planted.side_tasks): a compiled RASP case among side tasks that fill
the rest of its model; the side tasks' layout and functions, the bundle's labels against independent
references, per-task strictness in the high-level model, and one script of digits for every task."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.circuit import head_node, mlp_node, parse_node
from bundle_checks import check_strict_by_construction, run_task
from planted import get_planted, planted_names
from planted.case_bundles import MAIN_CASES, CompiledMain, case_bundle
from planted.registry import bundle_views
from planted.side_tasks import Copy, Lag, Select, fill, head_functions
from rasp_programs.case import CaseError

CASES = ("33", "13", "19")
"""One MLP-only circuit, a bidirectional head + MLP circuit, a three-layer circuit with every MLP taken."""
N = 400


def _components(n_layers: int, n_heads: int) -> set[str]:
    return {head_node(l, h) for l in range(n_layers) for h in range(n_heads)} | {mlp_node(l) for l in range(n_layers)}


def _node_values(parts, n_values: int, max_len: int, n: int = 3000) -> dict[str, torch.Tensor]:
    """Every side node's values [n, T] on random full-length digit sequences."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.cat([torch.zeros(n, 1, dtype=torch.long), 1 + torch.randint(0, n_values, (n, max_len), generator=g)], 1)
    mask = torch.ones_like(tokens)
    out = {}
    for part in parts:
        _, values = part.model.run(tokens, mask)
        out.update({node: values[i] for i, node in enumerate(part.model.nodes)})
    return out


@pytest.mark.parametrize("n_layers,occupied", [(2, {"m0"}), (2, {"a0.h2", "m0"}), (3, {"m0", "a1.h1", "m1", "m2"}),
                                               (2, {"a0.h0", "m0", "a1.h3", "m1"})])
def test_side_tasks_fill_the_free_components_and_no_two_nodes_carry_one_value(n_layers, occupied):
    parts = fill(n_layers, 4, occupied, n_values=6, max_len=5)
    placed = [c for p in parts for c in p.placement.values()]
    assert len(placed) == len(set(placed)) and not set(placed) & occupied
    free = _components(n_layers, 4) - occupied
    assert {c for c in free if c.startswith("m")} <= set(placed)  # every free MLP answers a task
    assert set(placed) == free  # with four heads a layer, every free head finds a function or a lag to carry
    owner = {c: p.key for p in parts for c in p.placement.values()}
    values = _node_values(parts, 6, 5)
    for a, b in itertools.combinations(values, 2):  # at no position do two tasks' nodes carry the same value
        if owner[a] == owner[b]:
            continue
        same = (values[a] == values[b]).all(0) & (values[a] != 0).any(0)
        assert not same[1:].any(), f"{a} and {b} carry the same value at positions {same.nonzero().flatten().tolist()}"
    for part in parts:  # a part's nodes read earlier components only
        for node in part.model.node_list:
            assert all(parse_node(p).layer <= parse_node(node.name).layer for p in node.parents)
            if parse_node(node.name).kind == "head" and parse_node(node.name).layer > 0:
                assert not isinstance(node.fn, Select)  # content selection only in layer 0 (planted.side_tasks)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=5), st.sampled_from([2, 3]))
def test_side_tasks_compute_what_their_references_say(digits, n_layers):
    for part in fill(n_layers, 4, {"m0"}, n_values=6, max_len=5):
        tokens = torch.tensor([[0, *[d + 1 for d in digits], *[7] * (5 - len(digits))]])
        mask = torch.tensor([[1] * (len(digits) + 1) + [0] * (5 - len(digits))])
        labels, _ = part.model.run(tokens, mask)
        assert labels[0, 1:len(digits) + 1].tolist() == part.reference(tuple(digits)), part.key


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_a_side_heads_keys_hold_what_it_copies(digits):
    """Each side head's keys (what training sharpens its attention on, siit.train_setup) are the positions
    whose digit it outputs, or BOS where it outputs nothing (0)."""
    tokens = torch.tensor([[-1, *digits, *[6] * (5 - len(digits))]])
    real = torch.tensor([[True] * (len(digits) + 1) + [False] * (5 - len(digits))])
    for fn in head_functions(5, 6):
        values, keys = fn(tokens, real)[0], fn.keys(tokens, real)[0]
        for i in range(1, len(digits) + 1):
            where = keys[i].nonzero().flatten().tolist()
            assert where and all(j < i for j in where), (fn, i)
            if where != [0]:
                assert all(int(tokens[0, j]) == int(values[i]) for j in where), (fn, i)
            else:
                assert int(values[i]) == 0, (fn, i)


@pytest.fixture(scope="module", params=CASES)
def bundle(request, compiled):
    return case_bundle(request.param, compiled(request.param))


def _run(task, n=N, seed=0):
    return run_task(task, n, seed)


def test_case_bundles_are_listed_and_resolved():
    names = planted_names()
    assert all(f"mt-case-{cid}.case-{cid}" in names for cid in MAIN_CASES)
    assert bundle_views("mt-case-33")[0] == "mt-case-33.case-33"  # the case is the main task
    view = get_planted("mt-case-33.lag2")
    assert view.bundle is not None and view.case.id == "mt-case-33.lag2" and view.case.family == "planted"
    with pytest.raises(CaseError, match="unknown planted model"):
        get_planted("mt-case-33.nothing")
    with pytest.raises(CaseError, match="classification"):
        case_bundle("3")  # regression: its answer is no class of the shared unembedding


def test_labels_follow_each_tasks_reference(bundle):
    """The case's rows answer as its RASP program (rasp.evaluate), each side task's as its reference."""
    for view in (None, *range(len(bundle.view_names))):
        task = bundle.task(view)
        seqs, _, _, labels, _, positions = _run(task, n=120)
        assert torch.equal(labels[positions], task.labels(seqs)[positions]), view


def test_a_side_row_is_the_case_written_in_another_script(bundle):
    """The compiled case's node values on a side task's row are its values on the same digits in the
    case's own tokens (so an interchange from any row into any row has an exact label)."""
    training = bundle.task()
    seqs, tokens, mask, _, values, _ = _run(training, seed=1)
    vocab = bundle.case.vocab
    as_case = [tuple(t if t in vocab else vocab[int(str(t).rsplit(":", 1)[1])] for t in seq) for seq in seqs]
    case_tokens, case_mask = bundle.task(0).encoding.encode(as_case)
    _, case_values = training.model.run(case_tokens, case_mask)
    width = values.shape[-1] - len(training.model.sides)
    assert torch.equal(values[..., :width], case_values[..., :width])
    assert len({"case" if seq[0] in vocab else seq[0].rsplit(":", 1)[0] for seq in seqs}) == len(bundle.view_names)


def test_other_tasks_nodes_never_move_a_tasks_output(bundle):
    check_strict_by_construction(bundle, N)


def test_views_share_the_model_and_each_holds_its_part(bundle):
    training = bundle.task()
    seen: list[str] = []
    for k, name in enumerate(bundle.view_names):
        view = bundle.task(k)
        assert view.case.id == name and view.encoding == training.encoding  # one vocabulary and unembedding
        assert ("input", "logits") in view.graph.edges  # a task's tokens raise its own answer classes
        seen += view.graph.nodes
    assert sorted(seen) == sorted(training.graph.nodes)
    main = bundle.task(0).graph
    assert set(main.nodes) == set(bundle.placement.values())
    assert len(main.edges) == len(bundle.graph.edges) + 1  # the case's edges on its components, and the direct path
    assert dataclasses.replace(bundle).view_names == bundle.view_names  # built from the catalogue alone: stable


def test_a_catalogue_that_disagrees_with_the_compiled_case_is_refused(compiled):
    bundle = case_bundle("33", compiled("33"))
    wrong = CompiledMain(bundle.case, bundle.graph, ("odd", "even"), compiled("33"))
    with pytest.raises(CaseError, match="differ from the shipped catalogue"):
        wrong.compiled()


def test_a_view_trains_its_bundle_with_the_bundles_settings():
    """A case bundle's view trains the bundle (every task's rows) with node-level strictness, no distractors
    (every component is some task's circuit) and the settings no option sets (PlantedTask.training)."""
    from siit.config import TrainConfig
    from zoo.multi_task_entry import training_task
    from zoo.train_entry import with_task_defaults

    view = get_planted("mt-case-33.case-33")
    trained_on = training_task(view)
    assert trained_on.case.id == "mt-case-33" and trained_on.covers_model and view.training == ()
    config = with_task_defaults(TrainConfig(), trained_on, lr_given=False)
    assert (config.view_phase, config.strict_all, config.stall_tolerance) == (True, 0.25, 1e-4)
    assert config.distractors is False and config.strict_edges is False and config.n_train == 8192
    assert with_task_defaults(TrainConfig(), get_planted("mt-2x2.first"), lr_given=False).strict_all == 0.0
