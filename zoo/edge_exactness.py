"""A trained model + its compiled case -> validation.json's `edge_effects`: is the edge-level ground
truth true? Every q/k/v edge is patched alone (resample, the evaluator's exact edge patching) and
its effect measured as a node's is (siit.validation): the fraction of labelled positions whose
output changes against the unpatched model. An edge outside circuit.json (q/k/v parts of a labelled
head edge count as labelled), including one between two circuit nodes that the high-level graph
lacks, must move nothing (issue 36's bound, EDGE_BOUND).

SIIT's strictness is node-level: it ablates a node for every reader at once, so a busy node whose
writes later components cancel passes it while its single edges move the output. This section
reports that. It decides met_criterion only for entries trained with edge-level strictness
(TrainConfig.strict_edges, `zoo train --strict-edges`; zoo.train_entry.with_edge_verdict): an
entry trained without it and `exact: false` has a node-level ground truth that holds and an
edge-level one that patching contradicts. Run on siit.transformer.Transformer (TransformerLens's hook protocol,
no transformer_lens import), padded inputs of mixed lengths only (eval's patching task, eval.patching.task, builds
padded inputs; validation.json's `edge_bounds`, siit.edge_bounds, bounds every edge per input length); models with more than
EDGE_LIMIT q/k/v edges are skipped (tests/benchmarks/bench_edge_exactness.py measures any entry).

What the sample can see: the positions of one input are not independent draws, so the unit is the
input sequence. `upper_95` is the one-sided 95% Clopper-Pearson bound (eval.core.proportion_bound)
on the fraction of inputs on which a non-circuit edge changes any output, from the most such inputs
any non-circuit edge changed (500 inputs, none changed: 0.006); `resolved` when it is <= the bound.
It bounds the fraction of inputs, not of positions: pooled over lengths, an edge that only moves
long inputs can move a larger share of positions than of inputs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

EDGE_N = 500
"""Clean inputs (and as many counterfactuals): an edge that changes no output on any of them moves
at most 0.006 of the inputs at 95% (`upper_95`, the sequence as unit)."""
EDGE_SEED = 7
"""Seed of those inputs: not the validation set's, nor `zoo eval`'s default."""
EDGE_BOUND = 0.01
"""Largest effect a non-circuit edge may have (issue 36; the node-level bound of validation.json)."""
EDGE_LIMIT = 5000
"""More q/k/v edges than this are not patched at training time (causal-bench-12x12 has 32,491)."""


def _rows(model: Any, task: Any) -> int:
    """Rows of one patched pass: 4096, fewer for a model whose per-node activations are wide (planted
    large-circuit: siit.interventions.rows_per_pass)."""
    from siit.interventions import rows_per_pass

    return min(4096, rows_per_pass(model, int(task.tokens.shape[1])))


def edge_section(config: Mapping[str, Any], state_dict: Mapping[str, Any], circuit_json: Mapping[str, Any],
                 compiled: Any, tolerance: float | None, *, n: int = EDGE_N, seed: int = EDGE_SEED,
                 limit: int | None = None, bound: float = EDGE_BOUND) -> dict[str, Any]:
    """validation.json's `edge_effects` (see the module docstring); the benchmark passes its own n,
    seed, edge limit (default EDGE_LIMIT, read at the call) and bound."""
    import torch

    from eval.core.circuit import Circuit
    from eval.core.graph import graph_of
    from eval.core.proportion_bound import upper_bound
    from eval.methods.edge_patching import movement_metric, per_edge
    from eval.patching.ablation import make_context
    from eval.patching.task import make_task
    from siit.high_level import as_task
    from siit.transformer import Transformer

    model = Transformer.from_state_dict(config, state_dict).eval()
    graph = graph_of(model)
    edges = list(graph.at("qkv").edges)
    head = {"bound": bound, "n": n, "seed": seed, "ablation": "resample", "input_shape": "padded",
            "qkv_edges": len(edges)}
    if len(edges) > (limit := EDGE_LIMIT if limit is None else limit):
        return {**head, "skipped": f"{len(edges)} q/k/v edges > {limit}: measure with "
                                   "tests/benchmarks/bench_edge_exactness.py"}
    source = as_task(compiled)
    task = make_task(case=source.case, encoding=source.encoding, reference=source.high_level(), n=n, seed=seed)
    ctx = make_context(model, task, graph)
    with torch.no_grad():
        clean = ctx.forward()
    # one patched pass per edge serves every number (the changes, and the logit movement of
    # eval.methods.edge_patching.logit_movement on the same logits)
    metric, moved_by = changes(task, clean, tolerance or 0.05), movement_metric(task, clean)
    stats = per_edge(ctx, edges, lambda logits: torch.cat([metric(logits), moved_by(logits)[None]]),
                     max_rows=_rows(model, task))
    effect = {e: float(v[0]) for e, v in stats.items()}
    changed = {e: int(v[1]) for e, v in stats.items()}
    moved = {e: float(v[2]) for e, v in stats.items()}
    labelled = {tuple(e) for e in Circuit.from_json(circuit_json).promoted().edges}
    inside = [e for e in edges if (e[0], e[1].split("<")[0]) in labelled]
    outside = [e for e in edges if (e[0], e[1].split("<")[0]) not in labelled]
    worst = max(outside, key=effect.get, default=None)
    worst = worst if worst is not None and effect[worst] > 0 else None  # no edge moved anything: none is worst
    positions = int(task.positions.sum())
    k = max((changed[e] for e in outside), default=0)
    upper = math.ceil(upper_bound(k, n) * 1e6) / 1e6
    above = sorted((e for e in outside if effect[e] > bound), key=lambda e: -effect[e])
    return {**head, "labelled_positions": positions, "max_out_of_circuit_changed_sequences": k, "upper_95": upper,
            "resolved": upper <= bound, "exact": not above,
            "max_out_of_circuit_edge_effect": round(effect[worst], 6) if worst else 0.0,
            "worst_edge": f"{worst[0]}->{worst[1]}" if worst else None,
            "out_of_circuit_edges_above_bound": [[f"{s}->{d}", round(effect[(s, d)], 6)] for s, d in above],
            "min_circuit_edge_effect": round(min((effect[e] for e in inside), default=0.0), 6),
            "median_circuit_edge_effect": round(statistics.median(effect[e] for e in inside), 6) if inside else None,
            "max_out_of_circuit_logit_change": round(max((moved[e] for e in outside), default=0.0), 4),
            "median_circuit_logit_change": round(statistics.median(moved[e] for e in inside), 4) if inside else None,
            "definition": "fraction of labelled positions whose output changes (regression: by >= tolerance) when "
                          "the edge alone is patched to its counterfactual value, on padded inputs; upper_95: "
                          "95% Clopper-Pearson bound on the fraction of inputs on which a non-circuit edge "
                          "changes any output (the input as unit); logit change: the largest |logit change| at "
                          "a labelled position"}


def changes(task: Any, clean: Any, tolerance: float):
    """Metric of one block of patched logits: [the fraction of labelled positions whose output
    moved, by the rule validation's node effects use (siit.losses.agree); the number of inputs
    with any moved position]."""
    from siit.losses import agree, predictions

    pos, kind = task.positions, task.task_kind
    before = predictions(clean, kind)

    def metric(logits: Any) -> Any:
        import torch

        moved = ~agree(predictions(logits, kind), before, kind, tolerance) & pos
        return torch.stack([moved[pos].float().mean(), moved.any(dim=1).float().sum()])

    return metric
