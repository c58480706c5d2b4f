"""validation.json's bounds -> the sentences the model card and the CLI print: the node-level bound on
a fresh sample (siit.effect_bounds), the edge labels under patching on padded inputs
(zoo.edge_exactness) and the edge-level bound per input length (siit.edge_bounds)."""

from __future__ import annotations

from typing import Any

from zoo.hub_metadata import cell


def bound_sentence(bounds: Any, *, markdown: bool = True) -> str | None:
    """validation.json's `effect_bounds` (siit.effect_bounds) in one sentence: exact or not, resolved
    or not, with the worst cell; None for an entry without it. The card and the CLI (markdown=False)
    print it."""
    if not isinstance(bounds, dict) or "exact" not in bounds:
        return None
    b, c = ("**", "`") if markdown else ("", "")
    w = bounds.get("worst") if isinstance(bounds.get("worst"), dict) else {}
    conf = bounds.get("confidence")
    verdict = _verdict(bounds, b)
    where = (f"node {c}{cell(w.get('node'))}{c}, " if w.get("node") else "") + (
        f"length {cell(w.get('length'))}, {cell(w.get('shape'))} inputs, {cell(w.get('ablation'))} ablation, "
        f"{cell(w.get('changed_sequences'))} of {cell(w.get('n_sequences'))} sequences changed")
    rule = _padded_for_all(bounds)
    return (f"{verdict} at bound {_fine(bounds.get('bound'))}: largest out-of-circuit node effect "
            f"{_fine(bounds.get('max_effect'))}, largest {f'{conf:.0%}' if isinstance(conf, float) else '-'} upper "
            f"bound {_fine(bounds.get('max_upper_95'))} ({cell(bounds.get('n_per_length'))} fresh sequences per "
            f"input length and shape, the sequence as unit{rule}; worst: {where})")


def _padded_for_all(bounds: dict[str, Any]) -> str:
    """The clause a bound adds when it patched fewer shapes than the entry has (a causal model's padded
    copy standing for all: siit.effect_bounds.measured_shapes); "" for older sections without the record."""
    measured = bounds.get("measured_shapes")
    return ("; causal attention, so the padded shape stands for every shape"
            if measured is not None and measured != bounds.get("input_shapes") else "")


def _verdict(bounds: dict[str, Any], b: str) -> str:
    """exact or not, resolved or not (b: the bold marker, or none)."""
    return (f"{b}exact{b}" if bounds["exact"] else f"{b}NOT exact{b}") + (
        ", resolved" if bounds.get("resolved") else f", {b}not resolved{b} (an upper bound above it)")


def _fine(value: Any) -> str:
    """A bound-sized figure: 4 decimals (0.00994 is not 0.010)."""
    return f"{value:.4f}" if isinstance(value, float) else cell(value)


def edge_lines(edges: Any) -> list[str]:
    """Whether the edge labels hold under patching (validation.json's edge_effects, zoo.edge_exactness)."""
    if not isinstance(edges, dict) or not edges:
        return []
    if edges.get("skipped"):
        return ["", f"Edge-level ground truth: not measured at training time ({cell(edges['skipped'])})."]
    above = edges.get("out_of_circuit_edges_above_bound") or []
    if edges.get("exact"):
        worst = f", `{cell(edges['worst_edge'])}`" if edges.get("worst_edge") else ""
        verdict = (f"**exact**: no edge outside the circuit moves an output on more than {cell(edges.get('bound'))} "
                   f"of labelled positions (largest {cell(edges.get('max_out_of_circuit_edge_effect'))}{worst})")
    else:
        shown = ", ".join(f"`{cell(e)}` {cell(v)}" for e, v in above[:8] if isinstance(e, str))
        verdict = (f"**NOT exact**: {len(above)} edge(s) outside the circuit move outputs on more than "
                   f"{cell(edges.get('bound'))} of labelled positions ({shown}). The node-level circuit holds "
                   "(above); which paths between nodes the model uses does not match the labelled edges, so "
                   "score edge-level methods on this entry with care")
    if "upper_95" in edges:  # the sequence as unit (entries before it printed a rule of three over positions)
        seen = (f"95% upper bound {_fine(edges.get('upper_95'))} on the inputs a non-circuit edge changes, "
                f"{'resolved' if edges.get('resolved') else 'not resolved'}")
    else:
        seen = f"resolution about {cell(edges.get('resolution'))}"
    return ["", f"Edge-level ground truth ({cell(edges.get('n'))} padded inputs, each q/k/v edge patched alone, "
            f"resample; {seen}): {verdict}. Circuit edges: smallest effect "
            f"{cell(edges.get('min_circuit_edge_effect'))}, median {cell(edges.get('median_circuit_edge_effect'))}."]


def edge_bound_sentence(bounds: Any, *, markdown: bool = True) -> str | None:
    """validation.json's `edge_bounds` (siit.edge_bounds) in one sentence: exact or not, resolved or
    not, with the worst (edge, length) cell; None for an entry without it."""
    if not isinstance(bounds, dict) or not bounds:
        return None
    if bounds.get("skipped"):
        return f"not measured ({cell(bounds['skipped'])})"
    if "exact" not in bounds:
        return None
    b, c = ("**", "`") if markdown else ("", "")
    w = bounds.get("worst") if isinstance(bounds.get("worst"), dict) else {}
    verdict = _verdict(bounds, b)
    where = (f"edge {c}{cell(w.get('edge'))}{c}, " if w.get("edge") else "") + (
        f"length {cell(w.get('length'))}, " + (f"{w['ablation']}, " if w.get("edge") and w.get("ablation") else "")
        + f"{cell(w.get('changed_sequences'))} of {cell(w.get('n_sequences'))} sequences changed")
    # entries validated before mean ablation was added name their one ablation as `ablation`
    ablations = " and ".join(bounds.get("ablations") or [bounds.get("ablation") or "resample"])
    shapes = ", ".join(bounds.get("measured_shapes") or [])
    rule = _padded_for_all(bounds)
    return (f"{verdict} at bound {_fine(bounds.get('bound'))}: largest effect of a non-circuit q/k/v edge patched "
            f"alone ({ablations}) {_fine(bounds.get('max_effect'))}, largest 95% upper bound "
            f"{_fine(bounds.get('max_upper_95'))} "
            f"({cell(bounds.get('out_of_circuit_edges'))} edges, {cell(bounds.get('n_per_length'))} fresh sequences "
            f"per input length, {shapes} inputs{rule}; worst: {where})")
