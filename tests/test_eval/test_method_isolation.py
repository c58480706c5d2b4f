"""Methods are isolated from each other (issue 36, item 4): whatever a method does to the shared
model, grad mode or random state is undone before the next one runs, and a method that changed
the weights is named in one line. Outputs that rank nothing are refused: empty scores, string
scores, and a score file whose only circuit is empty."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodError, call_method, read_score_file, validate_output

GRAPH = ComputationGraph(n_layers=2, n_heads=2)
ANSWER = {"nodes": {"m0": 1.0, "a1.h0": 0.5}}


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3))
        self.register_buffer("mask", torch.ones(3))


def _call(function) -> tuple[Tiny, object]:
    model = Tiny()
    out = call_method(Method(key="probe", name="probe", function=function), model, None, graph=GRAPH, seed=0,
                      ablation="resample")
    return model, out


def test_a_method_that_trains_the_model_in_place_is_named_and_undone() -> None:
    def fine_tunes(model, task):
        with torch.no_grad():
            model.w.add_(1.0)
            model.mask.zero_()
        return ANSWER

    model = Tiny()
    with pytest.raises(MethodError) as info:
        call_method(Method(key="tuner", name="tuner", function=fine_tunes), model, None, graph=GRAPH, seed=0,
                    ablation="resample")
    message = str(info.value)
    assert "method 'tuner' changed the model's weights (mask, w)" in message and "\n" not in message
    assert torch.equal(model.w, Tiny().w) and torch.equal(model.mask, torch.ones(3))


def test_a_method_that_replaces_a_parameter_is_named() -> None:
    def replaces(model, task):
        model.w = torch.nn.Parameter(torch.zeros(2, 3))
        return ANSWER

    with pytest.raises(MethodError, match=r"changed the model's weights \(w\)"):
        _call(replaces)


def test_grad_mode_training_mode_and_random_state_are_restored() -> None:
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    expected = torch.rand(3), np.random.rand(3), random.random()
    torch.manual_seed(1), np.random.seed(2), random.seed(3)

    def careless(model, task):
        torch.set_grad_enabled(False)
        model.eval()
        torch.rand(100), np.random.rand(100), random.random()  # draws from the global generators
        return ANSWER

    model, out = _call(careless)
    assert torch.is_grad_enabled() and model.training
    assert torch.equal(torch.rand(3), expected[0]) and np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]
    assert out.node_scores["m0"] == 1.0


def test_a_method_that_raises_still_leaves_the_model_as_it_was() -> None:
    def breaks(model, task):
        with torch.no_grad():
            model.w.mul_(0)
        torch.set_grad_enabled(False)
        raise RuntimeError("boom")

    model = Tiny()
    with pytest.raises(MethodError, match="raised RuntimeError: boom"):
        call_method(Method(key="b", name="b", function=breaks), model, None, graph=GRAPH, seed=0, ablation="resample")
    assert torch.equal(model.w, Tiny().w) and torch.is_grad_enabled()


@pytest.mark.parametrize("raw,needle", [
    ({"edges": {}}, "returned empty scores"),
    ({"nodes": {}, "edges": {}}, "returned empty scores"),
    ({"nodes": {"input": 1.0, "logits": 2.0}}, "returned empty scores"),  # nothing left once they are dropped
    ({"nodes": {"m0": "0.5"}}, "'0.5', a string, not a number"),
    ({"edges": {"input->m0": b"1"}}, "a string, not a number"),
    ({"circuits": [{"nodes": [], "edges": []}]}, "returned only empty circuits"),
    ({"circuits": [{"nodes": ["input", "logits"]}, {"nodes": []}]}, "returned only empty circuits"),
])
def test_outputs_that_rank_nothing_are_refused(raw, needle) -> None:
    with pytest.raises(MethodError) as info:
        _call(lambda model, task: raw)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_an_empty_circuit_beside_others_is_kept() -> None:
    """A sweep's largest threshold may prune everything: only a sweep of nothing but empty
    circuits is refused."""
    out = validate_output({"circuits": [{"nodes": ["m0"], "param": 0.1}, {"nodes": [], "param": 9.0}]}, GRAPH,
                          source="m")
    assert [run.param for run in out.circuits] == [0.1, 9.0]


def test_a_score_file_whose_only_circuit_is_empty_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "circuit.json"
    path.write_text(json.dumps({"cfg": {}, "nodes": {c: {"in_graph": False} for c in GRAPH.components},
                                "edges": {"input->m0": {"score": None, "in_graph": False}}}))
    with pytest.raises(MethodError, match="returned only empty circuits"):
        read_score_file(path, GRAPH)


def test_cli_refuses_an_empty_method_output_in_one_line(compiled_root, capsys) -> None:
    from zoo.cli import main

    root = compiled_root("4")
    code = main(["eval", "case", "4", "--model", "compiled", "--root", str(root), "--method",
                 "test_method_isolation:empty_method", "--n", "64", "--stability-seeds", "2", "--permutations", "20"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("zoo: error: ") and "returned empty scores" in err


def empty_method(model, task):
    return {"edges": {}}
