"""The evaluator on real compiled models: ablation identities, baselines, the report, the CLI.

Node-level metrics use every head and MLP of the model as the universe: components outside the
compiled graph (zero weights) are the negatives. Cases 4 and 19 have 4 circuit nodes of 6.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from eval.patching.ablation import behaviour, make_context, run_edges_kept, run_nodes_ablated
from eval.methods.activation_patching import activation_patching
from eval.methods.random_scores import random_scores
from eval.evaluator.evaluate import Settings
from zoo.targets import evaluate, resolve_target
from eval.core.graph import graph_of
from eval.methods.interface import MethodError, to_score_file
from eval.core.metrics import roc
from eval.evaluator.report import table
from eval.patching.task import make_task

FAST = dict(n=64, stability_seeds=2, permutations=50)


def _task(cc, n=64, seed=0):
    return make_task(case=cc.case, encoding=cc.encoding, reference=cc.model, n=n, seed=seed)


@pytest.mark.smoke
@pytest.mark.parametrize("case_id", ["4", "19"])
def test_activation_patching_ranks_every_circuit_node_first(compiled, case_id):
    cc = compiled(case_id)
    graph = graph_of(cc.model)
    truth = set(cc.graph.nodes)
    assert 0 < len(truth) < len(graph.components)  # both classes present
    out = activation_patching(cc.model, _task(cc), graph=graph)
    scores = {c: abs(v) for c, v in out.node_scores.items()}
    assert min(scores[c] for c in truth) > max(scores[c] for c in graph.components if c not in truth)
    assert roc(scores, truth).auroc == 1.0


def test_random_scores_average_near_half(compiled):
    cc = compiled("19")
    graph = graph_of(cc.model)
    task = _task(cc, n=8)
    aurocs = [roc({c: abs(v) for c, v in random_scores(cc.model, task, graph=graph, seed=s).node_scores.items()},
                  set(cc.graph.nodes)).auroc for s in range(200)]
    assert abs(np.mean(aurocs) - 0.5) < 0.06  # SE over 200 seeds is about 0.02
    assert np.std(aurocs) > 0.1  # it really varies with the seed


@pytest.mark.smoke
def test_edge_ablation_identities(compiled):
    cc = compiled("4")
    graph = graph_of(cc.model)
    task = _task(cc)
    ctx = make_context(cc.model, task, graph, "resample")
    clean = ctx.forward()
    all_edges = graph.at("qkv").edges
    assert torch.allclose(run_edges_kept(ctx, all_edges), clean, atol=1e-5)
    with torch.no_grad():
        cf = cc.model(task.cf_tokens, attention_mask=task.cf_mask)
    # ablating every edge feeds every reader the counterfactual run: the output is the counterfactual's
    assert torch.allclose(run_edges_kept(ctx, []), cf, atol=1e-4)
    # ablating a node equals ablating all of its outgoing edges
    node = "m0"
    kept = [e for e in all_edges if e[0] != node]
    assert torch.allclose(run_edges_kept(ctx, kept), run_nodes_ablated(ctx, [node]), atol=1e-4)
    assert not torch.allclose(run_nodes_ablated(ctx, [node]), clean, atol=1e-3)
    # zero-weight components change nothing when ablated
    assert torch.allclose(run_nodes_ablated(ctx, ["a0.h0", "a0.h1"]), clean, atol=1e-6)
    assert behaviour(task, clean) > behaviour(task, run_nodes_ablated(ctx, graph.components))


@pytest.mark.smoke
def test_evaluate_report_on_compiled_case(compiled, tmp_path):
    cc = compiled("19")
    methods = ["random", "activation_patching", "gradient_attribution", "ablation_scan", "greedy"]
    report = evaluate(cc, methods, **FAST)
    ap = report.method("activation_patching")
    assert ap.node.auroc == 1.0 and ap.node.at_top_k.f1 == 1.0
    assert ap.causal_bench.faithfulness == pytest.approx(1.0, abs=1e-6)
    assert ap.causal_bench.minimality == pytest.approx(1 - 4 / 6)
    assert 0 < ap.causal_bench.composite <= 1
    greedy = report.method("greedy")
    assert greedy.kind == "circuits" and greedy.node.auroc_kind == "pessimistic"
    assert set(greedy.identified) <= set(cc.graph.nodes) and greedy.causal_bench.faithfulness >= 0.8
    assert greedy.mib is None and ap.mib is not None
    assert ap.mib.n_edges[-1] == len(graph_of(cc.model).at("qkv").edges)
    assert ap.mib.f_abs[-1] == pytest.approx(1.0, abs=1e-6)  # the full model is faithful to itself
    assert report.convergence is not None and len(report.convergence.null) == 50
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert data["schema"] == "zoo-eval/1" and data["entry"]["model"] == "compiled"
    assert data["settings"]["stability_run_seeds"] == [0, 1] and "torch" in data["versions"]
    assert len(data["methods"]) == 5
    assert "activation_patching" in table(report)

    from eval.evaluator.plots import write_plots

    files = write_plots(report, tmp_path / "plots")
    assert {p.name for p in files} >= {"roc_node.png", "roc_edge.png", "causal_bench_radar.png",
                                       "convergence_null.png", "jaccard_heatmap.png"}
    assert all(p.stat().st_size > 1000 for p in files)


def test_score_file_round_trip_and_outside_method(compiled, tmp_path):
    cc = compiled("4")
    graph = graph_of(cc.model)
    out = activation_patching(cc.model, _task(cc), graph=graph)
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(to_score_file(out, {"method": "ap"})))
    report = evaluate(cc, "test_evaluator:tiny_method", scores=path, **FAST)
    assert report.method("file:scores.json").node.auroc == 1.0
    assert report.method("test_evaluator:tiny_method").node.auroc == 1.0
    circuit = {"nodes": {n: {"in_graph": n in cc.graph.nodes} for n in graph.components}, "edges": {}}
    path.write_text(json.dumps(circuit))
    result = evaluate(cc, scores=path, **FAST).methods[0]
    assert result.kind == "circuits" and result.node.auroc == 1.0


def tiny_method(model, task):
    """The shortest possible method: scores from a model weight norm (an outside method for tests)."""
    return {"nodes": {"m0": 1.0, "a1.h0": 1.0, "a1.h1": 1.0, "m1": 1.0, "a0.h0": 0.0}}


def raising_method(model, task):
    raise RuntimeError("boom")


def wrong_shape_method(model, task):
    return [0.1, 0.2]


def nan_method(model, task):
    return {"nodes": {"m0": float("nan")}}


@pytest.mark.parametrize(("spec", "message"), [
    ("test_evaluator:raising_method", "raised RuntimeError: boom"),
    ("test_evaluator:wrong_shape_method", "returned list"),
    ("test_evaluator:nan_method", "must be finite"),
    ("no_such_method", "unknown method 'no_such_method'"),
])
def test_bad_methods_fail_with_one_clear_error(compiled, spec, message):
    with pytest.raises(MethodError, match=message.replace("(", r"\(")):
        evaluate(compiled("4"), spec, **FAST)


@pytest.fixture
def cli_root(compiled_root) -> Path:
    return compiled_root("4")


@pytest.mark.parametrize(("payload", "message"), [
    ({"nodes": {}, "edges": {"a5.h0->m1": {"score": 1.0}}}, "not in the model"),
    ({"nodes": {}, "edges": {"a1.h0->a1.h1": {"score": 1.0}}}, "not in the model's graph"),
    ({"nodes": {"m0": {"score": "NaN"}}}, "'NaN', a string, not a number"),  # strings are never read as numbers
    ({"nodes": {"m0": {"score": 1e400}}}, "must be finite"),
    ({"nodes": {"m0": {"score": "high"}}}, "not a number"),
    ([1, 2], "expected MIB's format"),
])
def test_cli_bad_score_file_exit_2_no_partial_output(cli_root, tmp_path, zoo_cli, payload, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))  # 1e400 is inf in Python and "Infinity" in the file
    plots = tmp_path / "plots"
    code, out, err = zoo_cli(["eval", "case", "4", "--model", "compiled", "--root", str(cli_root),
                              "--scores", str(path), "--plots", str(plots), "--json"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zoo: error: ") and message in err
    assert not plots.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--method", "nope"], "unknown method 'nope'"),
    (["--method", "test_evaluator:raising_method"], "raised RuntimeError: boom"),
    (["--method", "test_evaluator:wrong_shape_method"], "returned list"),
    ([], "name a method"),
])
def test_cli_bad_method_exit_2(cli_root, tmp_path, zoo_cli, args, message):
    plots = tmp_path / "plots"
    code, out, err = zoo_cli(["eval", "case", "4", "--model", "compiled", "--root", str(cli_root),
                              "--plots", str(plots), *args])
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
    assert not plots.exists()


def test_cli_eval_json_and_plots(cli_root, tmp_path, zoo_cli):
    plots = tmp_path / "plots"
    code, out, err = zoo_cli(["eval", "case", "4", "--root", str(cli_root), "--method", "activation_patching",
                              "--method", "random", "--json", "--plots", str(plots), "--n", "64",
                              "--stability-seeds", "2", "--permutations", "50"])
    assert code == 0, err
    data = json.loads(out)
    assert data["entry"]["model"] == "compiled"  # no trained entry under this root
    assert data["ground_truth"]["nodes"] == ["m0", "a1.h0", "a1.h1", "m1"]
    assert [m["key"] for m in data["methods"]] == ["activation_patching", "random"]
    assert data["methods"][0]["node"]["auroc"] == 1.0
    assert sorted(p.name for p in plots.iterdir() if not p.name.startswith(".")) == sorted(
        ["roc_node.png", "roc_edge.png", "causal_bench_radar.png", "mib_faithfulness.png", "convergence_null.png",
         "jaccard_heatmap.png"])
    assert not [p for p in plots.iterdir() if p.name.startswith(".")]


def test_trained_model_requested_without_entry_is_an_error(cli_root, zoo_cli):
    code, out, err = zoo_cli(["eval", "case", "4", "--model", "trained", "--root", str(cli_root),
                              "--method", "random"])
    assert code == 2 and "no trained entry case-4" in err


def test_settings_are_validated(compiled):
    with pytest.raises(ValueError, match="unknown ablation"):
        evaluate(compiled("4"), "random", ablation="half", **FAST)
    with pytest.raises(TypeError):
        Settings(bogus=1)  # type: ignore[call-arg]
    assert resolve_target(compiled("4")).which == "compiled"
    assert math.isclose(Settings().relative_threshold, 0.05)


def test_qkv_level_auroc_sees_what_head_level_promotion_hides(compiled):
    """A scorer that scores only the v part of every ground-truth edge into a head is perfect at head
    level (a head edge takes its largest part) but not at q/k/v level, where the live q and k parts are
    positives it ranks last; head-level scores are copied to their parts; circuit methods have none."""
    cc = compiled("4")
    graph = graph_of(cc.model)
    truth = {tuple(e) for e in cc.graph.promoted().edges}
    into_heads = [e for e in truth if graph.expand_to_qkv(e) != [e]]
    assert into_heads  # the case has edges into heads

    def v_only(model, task, *, graph):
        scores = {}
        for e in graph.at("qkv").edges:
            head = (e[0], e[1].split("<")[0])
            scores[e] = (1.0 if e[1].endswith("<v>") or "<" not in e[1] else 0.0) if head in truth else 0.0
        return {"edges": {f"{a}->{b}": v for (a, b), v in scores.items()}}

    def head_level(model, task, *, graph):
        return {"edges": {f"{a}->{b}": float((a, b) in truth) for a, b in graph.edges}}

    from eval.methods.interface import Method

    report = evaluate(cc, [Method(key="v_only", name="v only", function=v_only),
                           Method(key="head_level", name="head level", function=head_level), "greedy"], **FAST)
    v, head, greedy = report.methods
    assert v.edge.auroc == 1.0 and head.edge.auroc == 1.0
    live = v.qkv_edge.n_positive
    assert live >= len(truth) and head.qkv_edge.auroc == 1.0
    assert v.qkv_edge.auroc < 1.0 and v.qkv_edge.level == "qkv_edge"
    assert greedy.qkv_edge is None
    assert 0 < v.qkv_edge.chance < 1
