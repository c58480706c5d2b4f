"""A trained model's validation -> the checks made by patching its exported weights, and the verdicts
they give: an entry whose edge labels or node-level bound patching contradicts is failed (zoo.train_entry
and zoo.multi_task_entry both judge with these).

Top level is standard library only; torch and eval are imported inside.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any


def cpu_state(model) -> dict[str, Any]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}  # entries hold CPU tensors


PATCHING_PARTS = ("inert edges", "edge patching")
"""What with_patching_checks computes, in order (told to its `stage` callback as each starts)."""


def with_patching_checks(validation: dict[str, Any], compiled, result, *, stage=None) -> dict[str, Any]:
    """siit's validation plus the checks made by patching the exported weights with eval (computed
    here so that siit's validation stays model-only): `inert_edges`, the labelled edges no
    counterfactual moves (issue 10), and `edge_effects`, whether the edge labels hold (issue 36)."""
    from siit.export import circuit_json

    circuit, state = circuit_json(compiled, result.correspondence), cpu_state(result.model)
    return patching_checks(validation, result.low_config, state, circuit, compiled, stage=stage)


def patching_checks(validation: dict[str, Any], config, state, circuit, compiled, *, stage=None) -> dict[str, Any]:
    """`validation` with `inert_edges` and `edge_effects` of the weights `state` (config.json's `config`,
    circuit.json's `circuit`) added; stage: called with each of PATCHING_PARTS as it starts."""
    from zoo.edge_exactness import edge_section
    from zoo.inert_edges import inert_section

    say = stage or (lambda part: None)
    say(PATCHING_PARTS[0])
    inert = inert_section(config, state, circuit, compiled)
    say(PATCHING_PARTS[1])
    return {**validation, "inert_edges": inert,
            "edge_effects": edge_section(config, state, circuit, compiled, validation.get("tolerance"))}


def with_edge_verdict(result, validation: dict[str, Any]):
    """The training result, failed if it was trained with edge-level strictness and patching finds a
    non-circuit edge above the bound: validation.json's `edge_effects` (the exported weights, eval's
    exact edge patching, padded inputs of mixed lengths) or `edge_bounds` (siit.edge_bounds: fresh
    sequences per input length). Such an entry claims edge-level ground truth that patching
    contradicts. Entries trained without it report both only (the node-level ground truth holds);
    a bound seen within the bound but not resolved passes, and the card says "not resolved"."""
    if not (result.config.trains_edges and result.met_criterion):
        return result
    edges, bounds = validation.get("edge_effects") or {}, validation.get("edge_bounds") or {}
    if not edges.get("skipped") and not edges.get("exact"):
        print(f"zoo: edge {edges.get('worst_edge')} moves {edges.get('max_out_of_circuit_edge_effect')} of the "
              f"outputs (bound {edges.get('bound')}): the edge-level ground truth fails", file=sys.stderr)
        return dataclasses.replace(result, met_criterion=False)
    if bounds and not bounds.get("skipped") and not bounds.get("exact"):
        w = bounds["worst"]
        print(f"zoo: edge {w['edge']} moves {w['effect']} of the outputs at input length {w['length']} "
              f"({w['changed_sequences']} of {w['n_sequences']} fresh sequences; bound {bounds['bound']}): the "
              "edge-level ground truth fails", file=sys.stderr)
        return dataclasses.replace(result, met_criterion=False)
    return result


def with_bound_verdict(result, validation: dict[str, Any]):
    """The training result, failed if validation.json's `effect_bounds` (siit.effect_bounds: fresh
    sequences per length, every input shape) sees an out-of-circuit node move more than the bound
    at some length, shape and ablation: the node-level ground truth does not hold there. A sample
    that sees no effect above the bound but does not resolve it (an upper_95 above it) passes,
    and the card says "not resolved"."""
    bounds = validation.get("effect_bounds")
    # an IIT-only or natural model (no strictness) claims no node-level bound: its other nodes may matter
    if bounds and result.met_criterion and result.config.strict_weight > 0 and not bounds["exact"]:
        w = bounds["worst"]
        print(f"zoo: node {w['node']} moves {w['effect']} of the outputs at input length {w['length']} "
              f"({w['shape']} inputs, {w['ablation']} ablation, {w['changed_sequences']} of {w['n_sequences']} "
              f"fresh sequences; bound {bounds['bound']}): the node-level ground truth fails", file=sys.stderr)
        return dataclasses.replace(result, met_criterion=False)
    return result
