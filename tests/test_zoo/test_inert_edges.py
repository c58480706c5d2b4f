"""Inert ground-truth edges (issue 10): an edge that no counterfactual of the task moves is listed in
the report (and in an entry's validation.json, tests/test_zoo/test_train_cli.py), never silently scored as a
miss or a hit."""

from __future__ import annotations

import pytest

pytest.importorskip("transformer_lens")


def _target(cc, truth=None):
    from eval.evaluator.evaluate import Target

    return Target(name="case-3", which="compiled", model=cc.model, truth=truth or cc.graph.promoted(),
                  case=cc.case, encoding=cc.encoding, reference=cc.model)


def test_compiled_case_3_report_lists_the_edges_no_counterfactual_moves(compiled):
    from eval.evaluator.evaluate import evaluate
    from eval.evaluator.report import table

    report = evaluate(_target(compiled("3")), ["edge_patching"], n=64, stability_seeds=1)
    # a1.h0 reads m0 only through its value and the input only through query and key: the other
    # parts of those two ground-truth head edges carry nothing the counterfactual changes
    assert set(report.inert.qkv_edges) == {"m0->a1.h0<q>", "m0->a1.h0<k>", "input->a1.h0<v>"}
    assert report.inert.edges == ()  # every head-level edge moves through some part, so all are scored
    assert report.method("edge_patching").edge.n_positive == 4
    text = table(report)
    assert "inert ground-truth edges" in text and "m0->a1.h0<q>" in text
    assert report.to_json()["inert"]["qkv_edges"] == ["input->a1.h0<v>", "m0->a1.h0<k>", "m0->a1.h0<q>"]


def test_a_wholly_inert_ground_truth_edge_is_left_out_of_edge_scoring(compiled):
    from eval.core.circuit import Circuit
    from eval.evaluator.evaluate import evaluate

    cc = compiled("3")
    truth = cc.graph.promoted()
    # input->logits: the unembedding reads none of the token / position directions, so patching it does nothing
    padded = Circuit.build(truth.nodes, [*truth.edges, ("input", "logits")])
    plain = evaluate(_target(cc), ["edge_patching", "greedy"], n=64, stability_seeds=1)
    report = evaluate(_target(cc, padded), ["edge_patching", "greedy"], n=64, stability_seeds=1)
    assert report.inert.edges == ("input->logits",)
    for key in ("edge_patching", "greedy"):
        edge, before = report.method(key).edge, plain.method(key).edge
        assert edge.excluded == ("input->logits",)
        assert (edge.n_positive, edge.n_total) == (before.n_positive, before.n_total - 1)
        assert edge.at_threshold.recall == before.at_threshold.recall  # not a missed positive
    # scored as a positive, edge patching's 0 on it would pull the AUROC below 1; it stays where it was
    assert report.method("edge_patching").edge.auroc == plain.method("edge_patching").edge.auroc == 1.0
    # greedy's node circuits always hold input->logits: there it was a false positive, now it is not scored
    assert report.method("greedy").edge.at_threshold.precision > plain.method("greedy").edge.at_threshold.precision


def test_validation_inert_edges_equal_the_evaluators_without_importing_transformer_lens(compiled, compile_cache):
    """zoo train's validation.json section (zoo.inert_edges, on siit's pure-torch model) lists what
    the evaluator's report lists on the TransformerLens model, and never imports transformer_lens
    (a ~5 s import, a third of `zoo train case 33`)."""
    import json
    import subprocess
    import sys

    from eval.evaluator.evaluate import evaluate
    from zoo.inert_edges import inert_section

    cc = compiled("3")
    section = inert_section(cc.config, cc.state_dict, cc.graph.promoted().to_json(), cc)
    report = evaluate(_target(cc), ["edge_patching"], n=section["n"], seed=section["seed"], stability_seeds=1)
    assert section["qkv_edges"] == report.inert.qkv_edges == ("input->a1.h0<v>", "m0->a1.h0<k>", "m0->a1.h0<q>")
    assert section["edges"] == report.inert.edges
    script = ("import sys; from pathlib import Path; from rasp_programs.lookup import get_case; "
              "from rasp_programs.compile import compile_case; from zoo.inert_edges import inert_section; "
              f"cc = compile_case(get_case('3'), Path({str(compile_cache)!r})); "
              "s = inert_section(cc.config, cc.state_dict, cc.graph.promoted().to_json(), cc); "
              "print(__import__('json').dumps([list(s['qkv_edges']), 'transformer_lens' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [list(section["qkv_edges"]), False]
