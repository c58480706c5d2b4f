"""Honest inputs and outputs of the evaluator (issue 10, item 3): a method that exits or prints,
and MIB score files that are empty, boolean, duplicated, several circuits, or large.

Score-file checks need only the graph of a model shape; the CLI checks run compiled case 4.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodError, call_method, read_score_file, validate_output

GRAPH = ComputationGraph(n_layers=2, n_heads=2)
FAST = ["--n", "64", "--stability-seeds", "2", "--permutations", "20"]


# --- methods a new user might write -------------------------------------------------------------

def exiting_method(model, task):
    sys.exit(0)


def exiting_with_message(model, task):
    sys.exit("giving up")


class Abort(BaseException):
    """A BaseException that is neither Exception nor SystemExit."""


def base_exception_method(model, task):
    raise Abort("stop\nright now")


def interrupting_method(model, task):
    raise KeyboardInterrupt


def printing_method(model, task):
    print("progress: 50%")
    sys.stdout.write("progress: 100%\n")
    os.write(1, b"raw fd-1 noise\n")  # what a C extension or subprocess would do
    return {"nodes": {"m0": 1.0, "a1.h0": 1.0, "a1.h1": 1.0, "m1": 1.0, "a0.h0": 0.0}}


def bool_method(model, task):
    return {"nodes": {"m0": True, "m1": False}}


# --- the CLI ---------------------------------------------------------------------------------------

@pytest.fixture
def cli_root(compiled_root) -> Path:
    return compiled_root("4")


def _cli(argv):
    from zoo.cli import main

    return main(["eval", "case", "4", "--model", "compiled", *argv])


@pytest.mark.parametrize(("spec", "message"), [
    ("test_evaluator_io:exiting_method", "called sys.exit(0) instead of returning scores"),
    ("test_evaluator_io:exiting_with_message", "called sys.exit('giving up')"),
    ("test_evaluator_io:base_exception_method", "raised Abort: stop | right now"),
    ("test_evaluator_io:bool_method", "a boolean, not a number"),
])
def test_cli_method_that_exits_is_one_line_exit_2(cli_root, capsys, spec, message):
    code = _cli(["--root", str(cli_root), "--method", spec, "--json", *FAST])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zoo: error: ") and message in err


@pytest.mark.parametrize(("corruption", "message"), [
    ("token", "unknown corruption 'token'"),
    ("token:9", "|K| must be at most"),  # case 4's inputs can be shorter than 9 tokens
])
def test_cli_bad_corruption_is_one_line_exit_2(cli_root, capsys, corruption, message):
    code = _cli(["--root", str(cli_root), "--method", "random", "--corruption", corruption, "--json", *FAST])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zoo: error: ") and message in err, err


def test_cli_token_corruption_is_recorded_in_the_report(cli_root, capsys):
    assert _cli(["--root", str(cli_root), "--method", "eap", "--corruption", "token:-1", "--json", *FAST]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["corruption"] == "token:-1" and "the last token" in settings["counterfactuals"]


def test_cli_keyboard_interrupt_in_a_method_is_an_interruption_not_success(cli_root, capsys):
    code = _cli(["--root", str(cli_root), "--method", "test_evaluator_io:interrupting_method", "--json", *FAST])
    out, err = capsys.readouterr()
    assert code == 130 and out == "" and err == "zoo: interrupted\n"


def test_cli_method_prints_never_reach_json_stdout(cli_root, capfd):
    code = _cli(["--root", str(cli_root), "--method", "test_evaluator_io:printing_method", "--json", *FAST])
    out, err = capfd.readouterr()
    assert code == 0, err
    data = json.loads(out)  # nothing but the report on stdout
    assert data["methods"][0]["key"] == "test_evaluator_io:printing_method"
    assert "progress: 50%" in err and "progress: 100%" in err and "raw fd-1 noise" in err
    os.write(1, b"fd 1 restored\n")
    print("stdout restored")
    out, _ = capfd.readouterr()
    assert out == "fd 1 restored\nstdout restored\n"


def test_call_method_sends_prints_to_stderr(capsys):
    method = Method(key="p", name="p", function=lambda model, task: print("hello") or {"nodes": {"m0": 1.0}})
    out = call_method(method, None, None, graph=GRAPH, seed=0, ablation="resample")
    captured = capsys.readouterr()
    assert out.node_scores["m0"] == 1.0
    assert captured.out == "" and captured.err == "hello\n"


def test_bool_scores_from_a_method_are_rejected():
    with pytest.raises(MethodError, match="a boolean"):
        validate_output({"nodes": {"m0": True}}, GRAPH, source="method 'x'")
    import numpy as np

    with pytest.raises(MethodError, match="a boolean"):
        validate_output({"edges": {"input->m0": np.bool_(True)}}, GRAPH, source="method 'x'")


# --- score files -----------------------------------------------------------------------------------

def _write(tmp_path: Path, payload: object, name: str = "scores.json") -> Path:
    path = tmp_path / name
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


@pytest.mark.parametrize(("payload", "message"), [
    ({"edges": {}}, "has no node or edge entries"),
    ({"cfg": {}, "nodes": {}, "edges": {}}, "has no node or edge entries"),
    ({"nodes": None, "edges": {}}, "has no node or edge entries"),
    ({"edges": {"input->m0": {"score": True, "in_graph": False}}}, "a boolean, not a number"),
    ({"nodes": {"m0": {"score": False}}}, "a boolean, not a number"),
    ('{"edges": {"input->m0": {"score": 1.0}, "input->m0": {"score": 2.0}}}', "has the key 'input->m0' twice"),
    ('{"nodes": {"m0": {"score": 1.0, "score": 2.0}}}', "has the key 'score' twice"),
    ('{"edges": {}, "edges": {"input->m0": {"score": 1.0}}}', "has the key 'edges' twice"),
    ({"edges": {"input->m0": {"in_graph": [True, False, True]}}}, "holds one circuit"),
    ({"nodes": {"m0": {"in_graph": 1}}}, "not true/false"),
    ({"nodes": {"m0": {"score": 1.0}}, "circuits": []}, "unknown top-level keys ['circuits']"),
    ({"cfg": {"n_layers": 12, "n_heads": 2}, "nodes": {"m0": {"score": 1.0}}}, "cfg n_layers is 12, the model has 2"),
    ({"edges": {"input->m0": {"score": None}}}, "no entry has an in_graph flag"),
])
def test_bad_score_files_are_one_line_errors(tmp_path, payload, message):
    with pytest.raises(MethodError, match=None) as info:
        read_score_file(_write(tmp_path, payload), GRAPH)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_eap_ig_circuit_files_read_as_one_circuit(tmp_path):
    # EAP-IG's Graph.to_json of a circuit: scores null, in_graph flags; the older form maps nodes to bools
    payload = {"cfg": {"n_layers": 2, "n_heads": 2},
               "nodes": {"input": True, "m0": True, "a1.h0": False, "logits": True},
               "edges": {"input->m0": {"score": None, "in_graph": True},
                         "m0->a1.h0<q>": {"score": None, "in_graph": True},
                         "m0->logits": {"score": None, "in_graph": False}}}
    out = read_score_file(_write(tmp_path, payload), GRAPH)
    assert out.kind == "circuits" and len(out.circuits) == 1
    run = out.circuits[0]
    # an in-graph edge brings its endpoints: a1.h0 is in the circuit through its <q> input
    assert run.nodes == frozenset({"m0", "a1.h0"})
    assert run.edges == frozenset({("input", "m0"), ("m0", "a1.h0")})


def test_a_folder_of_mib_circuit_files_reads_as_several_circuits(tmp_path):
    folder = tmp_path / "circuits"
    folder.mkdir()
    sizes = {"k0.10": ["m0"], "k0.20": ["m0", "m1"], "k0.50": ["m0", "m1", "a1.h0"]}
    for name, nodes in sizes.items():
        _write(folder, {"cfg": {}, "nodes": {c: {"in_graph": c in nodes} for c in GRAPH.components}, "edges": {}},
               f"{name}.json")
    (folder / "notes.txt").write_text("not a circuit")
    out = read_score_file(folder, GRAPH)
    assert [r.param for r in out.circuits] == ["k0.10", "k0.20", "k0.50"]
    assert [set(r.nodes) for r in out.circuits] == [set(v) for v in sizes.values()]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MethodError, match="holds no .json circuit files"):
        read_score_file(empty, GRAPH)


def test_reading_a_large_score_file(tmp_path):
    """MIB's GPT-2-small edge count reads whole; that it reads in linear time is measured by
    tests/benchmarks/bench_score_files.py (a list.index-style check once made it quadratic)."""
    graph = ComputationGraph(n_layers=12, n_heads=12)
    edges = graph.at("qkv").edges
    assert len(edges) == 32491  # MIB's GPT-2 small count
    payload = {"cfg": {"n_layers": 12, "n_heads": 12}, "nodes": {},
               "edges": {f"{s}->{d}": {"score": 1.0 / (i + 1), "in_graph": False} for i, (s, d) in enumerate(edges)}}
    path = _write(tmp_path, payload)
    out = read_score_file(path, graph)
    assert len(out.edge_scores) == 32491
    assert out.edge_scores[edges[0]] == 1.0 and out.edge_scores[edges[-1]] == 1.0 / 32491


@pytest.mark.parametrize("payload", [{"edges": {}}, {"nodes": {"m0": {"score": True}}}])
def test_cli_bad_score_file_one_line_exit_2(cli_root, tmp_path, capsys, payload):
    code = _cli(["--root", str(cli_root), "--scores", str(_write(tmp_path, payload)), "--json", *FAST])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("zoo: error: ")


def test_cli_scores_a_folder_of_circuits(cli_root, compiled, tmp_path, capsys):
    truth = list(compiled("4").graph.nodes)
    folder = tmp_path / "mib"
    folder.mkdir()
    graph = ComputationGraph(n_layers=2, n_heads=2)
    for i in range(1, len(truth) + 1):
        _write(folder, {"nodes": {c: {"in_graph": c in truth[:i]} for c in graph.components}}, f"c{i}.json")
    code = _cli(["--root", str(cli_root), "--scores", str(folder), "--json", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)["methods"][0]
    assert result["kind"] == "circuits" and len(result["circuits"]) == len(truth)
    assert result["node"]["auroc"] == 1.0 and result["node"]["auroc_kind"] == "pessimistic"


def test_circuit_outputs_round_trip_through_a_folder_of_mib_files(tmp_path):
    from eval.methods.interface import to_circuit_files, to_score_file

    out = validate_output({"circuits": [
        {"param": 0.8, "nodes": ["m0", "a1.h0"]},
        {"param": "tau=0.1", "nodes": ["m0", "a1.h0", "m1"], "edges": ["input->m0", "m0->a1.h0<k>", "a1.h0->m1"]},
    ]}, GRAPH, source="method 'x'")
    with pytest.raises(MethodError, match="one MIB file per circuit"):
        to_score_file(out)  # an empty score file would read as nothing
    folder = tmp_path / "acdc"
    folder.mkdir()
    for name, payload in to_circuit_files(out, GRAPH).items():
        _write(folder, payload, name)
    back = read_score_file(folder, GRAPH)
    assert back.circuits == out.circuits


def test_eval_help_names_every_registered_method() -> None:
    from eval.methods.registry import REGISTRY
    from eval.methods.registry import BUILTIN_METHOD_KEYS

    assert BUILTIN_METHOD_KEYS == tuple(REGISTRY)
    assert all(key == method.key for key, method in REGISTRY.items())


def test_save_scores_writes_mib_files_that_read_back_to_the_same_output(tmp_path: Path) -> None:
    """--save-scores: a scorer's file and a circuit method's folder read back as what was written."""
    from eval.core.graph import ComputationGraph
    from eval.methods.interface import CircuitRun, MethodOutput, read_score_file
    from eval.evaluator.score_files import file_stem, save_output

    graph = ComputationGraph(n_layers=2, n_heads=2)
    scores = MethodOutput(node_scores={"a0.h0": 0.5, "m1": -1.0},
                          edge_scores={("input", "a1.h0<q>"): 0.25, ("m0", "logits"): 2.0})
    path = save_output(scores, graph, tmp_path / "out", "pkg.mod:fn")
    assert path == tmp_path / "out" / "pkg.mod_fn.json" and file_stem("..:/") == "_"
    back = read_score_file(path, graph)
    assert dict(back.edge_scores) == dict(scores.edge_scores)
    assert back.node_scores["a0.h0"] == 0.5 and back.node_scores["m1"] == -1.0
    runs = MethodOutput(circuits=(CircuitRun(param=0.1, nodes=frozenset({"a0.h0", "m1"}),
                                             edges=frozenset({("input", "a0.h0"), ("a0.h0", "m1"), ("m1", "logits")})),
                                  CircuitRun(param=1.0, nodes=frozenset({"m1"}), edges=frozenset({("m1", "logits")}))))
    folder = save_output(runs, graph, tmp_path / "out", "acdc")
    again = read_score_file(folder, graph)
    assert [(r.param, r.nodes, r.edges) for r in again.circuits] == [(r.param, r.nodes, r.edges) for r in runs.circuits]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temporaries left


def test_zoo_eval_save_scores_round_trips_through_scores(tmp_path: Path, capsys) -> None:
    from zoo.cli import main

    root, out = str(tmp_path / "root"), tmp_path / "saved"
    args = ["eval", "case", "33", "--model", "compiled", "--root", root, "--n", "16", "--stability-seeds", "1",
            "--permutations", "10", "--json"]
    assert main([*args, "--method", "eap", "--save-scores", str(out)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main([*args, "--scores", str(out / "eap.json")]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["methods"][0]["edge"]["auroc"] == first["methods"][0]["edge"]["auroc"]
    (tmp_path / "afile").write_text("x")
    assert main([*args, "--method", "eap", "--save-scores", str(tmp_path / "afile")]) == 2
    assert "is a file" in capsys.readouterr().err
