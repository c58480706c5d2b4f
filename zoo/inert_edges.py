"""A trained model + its compiled case -> validation.json's `inert_edges`: the ground-truth edges
that no counterfactual of the task moves (eval.evaluator.evaluate.inert_truth), so that a reader of the
entry knows which labelled edges no counterfactual method can find on this task.

Computed with the evaluator's own edge patching (eval.evaluator.evaluate.inert_truth) and task data
(INERT_N inputs, seed INERT_SEED, resample counterfactuals), on the exported weights run by
siit.transformer.Transformer, which speaks TransformerLens's hook protocol: the same function as
the TransformerLens model `zoo eval` builds (tests/test_zoo/test_inert_edges.py compares the two), without
the ~5 s transformer_lens import that would be a third of `zoo train case 33`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

INERT_N = 200
"""Clean inputs (and as many counterfactuals) the check patches on: `zoo eval`'s default n."""
INERT_SEED = 0
"""Seed of those inputs: `zoo eval`'s default seed."""


def inert_section(config: Mapping[str, Any], state_dict: Mapping[str, Any], circuit_json: Mapping[str, Any],
                  compiled: Any) -> dict[str, Any]:
    """validation.json's `inert_edges`: {edges, qkv_edges, atol, rule, n, seed}."""
    from eval.patching.ablation import make_context
    from eval.core.circuit import Circuit
    from eval.evaluator.evaluate import inert_truth
    from eval.core.graph import graph_of
    from eval.patching.task import make_task
    from siit.high_level import as_task
    from siit.transformer import Transformer

    model = Transformer.from_state_dict(config, state_dict).eval()
    source = as_task(compiled)  # labels from the high-level model: no TransformerLens either
    graph = graph_of(model)
    truth = Circuit.from_json(circuit_json).promoted()
    task = make_task(case=source.case, encoding=source.encoding, reference=source.high_level(), n=INERT_N,
                     seed=INERT_SEED)
    inert = inert_truth(make_context(model, task, graph), graph, truth, atol=1e-6)
    return {**dataclasses.asdict(inert), "n": INERT_N, "seed": INERT_SEED, "ablation": "resample"}
