"""Circuits -> faithfulness on the real model: CAUSAL-BENCH's node metrics and MIB's edge curve.

Two readings of "behaviour" (the papers differ; both are implemented and named):
- `normalized` (default): β(S) = (m(S) - m(∅)) / (m(N) - m(∅)) with m the logit difference
  (regression: signed move towards the clean label) and S kept while every other component is ablated. β(N) = 1 and
  β(∅) = 0, as in CAUSAL-BENCH's planted model where β(∅) ≈ sigmoid(-4) ≈ 0; it equals MIB's f.
- `accuracy`: β(S) = share of label positions the ablated model gets right (chance is not removed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

import numpy as np

from eval.ablation import AblationContext, behaviour, run_edges_kept, run_nodes_ablated
from eval.graph import ComputationGraph

BehaviourKind = Literal["normalized", "accuracy"]
MIB_SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeBehaviour:
    """β(S) for node sets S of one model under one ablation, with the two anchors cached."""

    ctx: AblationContext
    """Model, task data and ablation reference."""
    kind: BehaviourKind
    """Which reading of behaviour (module doc)."""
    full: float
    """m with nothing ablated."""
    empty: float
    """m with every component ablated."""

    def raw(self, kept: Collection[str]) -> float:
        """m (or accuracy) with every component outside `kept` ablated."""
        ablated = [c for c in self.ctx.graph.components if c not in set(kept)]
        metric = "accuracy" if self.kind == "accuracy" else "logit_diff"
        return behaviour(self.ctx.task, run_nodes_ablated(self.ctx, ablated), metric)

    def beta(self, kept: Collection[str]) -> float:
        value = self.raw(kept)
        if self.kind == "accuracy":
            return value
        return (value - self.empty) / (self.full - self.empty)


def node_behaviour(ctx: AblationContext, kind: BehaviourKind = "normalized") -> NodeBehaviour:
    """Measure the anchors m(N) and m(∅); fails if ablating everything changes nothing."""
    if kind not in ("normalized", "accuracy"):
        raise ValueError(f"unknown behaviour {kind!r}; allowed: normalized, accuracy")
    metric = "accuracy" if kind == "accuracy" else "logit_diff"
    full = behaviour(ctx.task, ctx.forward(), metric)
    empty = behaviour(ctx.task, run_nodes_ablated(ctx, ctx.graph.components), metric)
    if kind == "normalized" and abs(full - empty) < 1e-9:
        raise ValueError(f"{ctx.kind} ablation of every component leaves the metric unchanged ({full:.4g}); "
                         "faithfulness is undefined for this model and data")
    return NodeBehaviour(ctx=ctx, kind=kind, full=full, empty=empty)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GreedyPath:
    """Greedy pruning: from a start set, repeatedly remove the node whose removal keeps β highest."""

    start: tuple[str, ...]
    removed: tuple[str, ...]
    """Nodes in the order they were removed."""
    after: tuple[float, ...]
    """Faithfulness F = β(S)/β(start set's model) after each removal."""

    def circuit(self, threshold: float) -> set[str]:
        """The circuit greedy pruning stops at when F must stay >= threshold."""
        keep = set(self.start)
        for node, f in zip(self.removed, self.after):
            if f < threshold:
                break
            keep.discard(node)
        return keep


def greedy_path(nb: NodeBehaviour, start: Collection[str], *, stop_below: float = -np.inf) -> GreedyPath:
    """Walk greedy pruning from `start`; F is relative to the full model's β (CAUSAL-BENCH)."""
    keep = [c for c in nb.ctx.graph.components if c in set(start)]
    base = nb.beta(nb.ctx.graph.components)
    removed, after = [], []
    while keep:
        trials = [(nb.beta([k for k in keep if k != c]) / base, c) for c in keep]
        f, node = max(trials, key=lambda t: (t[0], t[1]))
        removed.append(node)
        after.append(f)
        keep.remove(node)
        if f < stop_below:
            break
    return GreedyPath(start=tuple(start), removed=tuple(removed), after=tuple(after))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CausalBench:
    """CAUSAL-BENCH §2.4 metrics of one identified node set."""

    identified: tuple[str, ...]
    """S_ℓ, the method's identified components."""
    faithfulness: float
    """F = β(S) / β(C)."""
    completeness: float
    """(β(C) - β(C \\ S)) / β(C)."""
    minimality: float
    """1 - |S| / |C|."""
    stability: float | None
    """Mean pairwise Jaccard over seed reruns (None when the method was run once)."""
    causal_optimality: float
    """|S_reduced| / |S| after greedy reduction keeping F >= cos_threshold (0 for an empty S)."""
    composite: float
    """Weighted harmonic mean of the five (stability left out when None)."""
    weights: Mapping[str, float]
    """Weights of the composite."""
    behaviour: BehaviourKind
    """How β was measured."""


DEFAULT_WEIGHTS = {"faithfulness": 1.0, "completeness": 1.0, "minimality": 1.0, "stability": 1.0,
                   "causal_optimality": 1.0}


def causal_bench(nb: NodeBehaviour, identified: Collection[str], *, stability: float | None,
                 weights: Mapping[str, float] | None = None, cos_threshold: float = 0.85) -> CausalBench:
    """Faithfulness, completeness, minimality, COS and the composite for one identified set."""
    from eval.metrics import weighted_harmonic

    comps = nb.ctx.graph.components
    s = [c for c in comps if c in set(identified)]
    b_full = nb.beta(comps)
    f = nb.beta(s) / b_full
    c = (b_full - nb.beta([x for x in comps if x not in s])) / b_full
    m = 1 - len(s) / len(comps)
    if s:
        reduced = greedy_path(nb, s, stop_below=cos_threshold).circuit(cos_threshold)
        cos = len(reduced) / len(s)
    else:
        cos = 0.0
    values = {"faithfulness": f, "completeness": c, "minimality": m, "causal_optimality": cos,
              "stability": stability if stability is not None else float("nan")}
    w = dict(weights or DEFAULT_WEIGHTS)
    unknown = set(w) - set(values)
    if unknown:
        raise ValueError(f"unknown composite weights {sorted(unknown)}; allowed: {', '.join(values)}")
    if stability is None:
        w.pop("stability", None)
    return CausalBench(identified=tuple(s), faithfulness=f, completeness=c, minimality=m, stability=stability,
                       causal_optimality=cos, composite=weighted_harmonic(values, w), weights=w,
                       behaviour=nb.kind)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MibCurve:
    """MIB §3.1: faithfulness f(C_k) of top-scored edge circuits of several sizes, CPR and CMD."""

    sizes: tuple[float, ...]
    """Proportions k of the model's q/k/v-level edges."""
    n_edges: tuple[int, ...]
    """Edges in each circuit: floor(k · |E|), so |C_k| / |E| <= k."""
    f_signed: tuple[float, ...]
    """f with the highest *signed* scores kept (used for CPR)."""
    f_abs: tuple[float, ...]
    """f with the highest-magnitude scores kept (used for CMD)."""
    cpr: float
    """Trapezoid area under f_signed over k (higher is better)."""
    cmd: float
    """Trapezoid area of |1 - f_abs| over k (0 is best)."""


def mib_curve(ctx: AblationContext, edge_scores: Mapping[tuple[str, str], float],
              sizes: Sequence[float] = MIB_SIZES) -> MibCurve:
    """Faithfulness curve over circuit sizes; head-level scores are copied to the q/k/v edges."""
    graph: ComputationGraph = ctx.graph.at("qkv")
    scores: dict[tuple[str, str], float] = {}
    for edge, value in edge_scores.items():
        for e in graph.expand_to_qkv(edge):
            scores[e] = value
    edges = list(graph.edges)
    full = behaviour(ctx.task, run_edges_kept(ctx, edges))
    empty = behaviour(ctx.task, run_edges_kept(ctx, []))
    if abs(full - empty) < 1e-9:
        raise ValueError("ablating every edge leaves the metric unchanged; MIB faithfulness is undefined")
    n_edges = [int(np.floor(k * len(edges) + 1e-9)) for k in sizes]
    curves = []
    for key in (lambda e: -scores.get(e, 0.0), lambda e: -abs(scores.get(e, 0.0))):
        ranked = sorted(edges, key=lambda e: (key(e), edges.index(e)))
        curves.append([(behaviour(ctx.task, run_edges_kept(ctx, ranked[:n])) - empty) / (full - empty)
                       for n in n_edges])
    f_signed, f_abs = curves
    ks = np.asarray(sizes, dtype=float)
    cpr = float(np.trapezoid(f_signed, ks))
    cmd = float(np.trapezoid(np.abs(1 - np.asarray(f_abs)), ks))
    return MibCurve(sizes=tuple(sizes), n_edges=tuple(n_edges), f_signed=tuple(f_signed),
                    f_abs=tuple(f_abs), cpr=cpr, cmd=cmd)
