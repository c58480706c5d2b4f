"""validation.json's `edge_effects` (zoo.edge_exactness, issue 36): every q/k/v edge patched alone,
its effect the fraction of labelled positions whose output moves. Known answers on the compiled
case 3, whose graph is exactly the paths its weights use: against that graph no other edge moves
anything; against a graph missing one used edge, that edge is reported above the bound."""

from __future__ import annotations

from zoo.edge_exactness import EDGE_BOUND, edge_section


def test_the_compiled_models_own_graph_is_edge_exact(compiled):
    cc = compiled("3")
    section = edge_section(cc.config, cc.state_dict, cc.graph.promoted().to_json(), cc, None)
    assert section["exact"] is True
    assert section["out_of_circuit_edges_above_bound"] == []
    assert section["max_out_of_circuit_edge_effect"] <= EDGE_BOUND
    assert section["median_circuit_edge_effect"] > 0.1  # the labelled edges do move the output
    # the sample can see an effect of the bound, with the input (not the position) as unit
    assert section["max_out_of_circuit_changed_sequences"] == 0
    assert section["upper_95"] < EDGE_BOUND and section["resolved"] is True


def test_an_unlabelled_edge_the_model_uses_makes_the_entry_not_exact(compiled):
    from eval.core.circuit import Circuit

    cc = compiled("3")
    truth = cc.graph.promoted()
    dropped = ("a1.h0", "logits")  # the only path to the output: it moves most outputs
    partial = Circuit.build(truth.nodes, [e for e in truth.edges if tuple(e) != dropped])
    section = edge_section(cc.config, cc.state_dict, partial.to_json(), cc, None)
    assert section["exact"] is False
    assert section["worst_edge"] == "a1.h0->logits"
    assert section["max_out_of_circuit_edge_effect"] > 0.5
    assert [e for e, _ in section["out_of_circuit_edges_above_bound"]] == ["a1.h0->logits"]
    # most inputs change: the bound lies above the fraction seen, far above EDGE_BOUND (not resolved)
    k, n = section["max_out_of_circuit_changed_sequences"], section["n"]
    assert k > n // 2 and section["upper_95"] >= k / n and section["resolved"] is False


def test_too_many_edges_are_skipped_with_a_reason(compiled, monkeypatch):
    import zoo.edge_exactness as edge_exactness

    cc = compiled("3")
    monkeypatch.setattr(edge_exactness, "EDGE_LIMIT", 10)
    section = edge_exactness.edge_section(cc.config, cc.state_dict, cc.graph.promoted().to_json(), cc, None)
    assert "skipped" in section and "bench_edge_exactness" in section["skipped"] and "exact" not in section
