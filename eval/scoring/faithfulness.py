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

from eval.patching.ablation import (AblationContext, behaviour, behaviour_tensor, node_metrics, run_edges_kept,
                           run_nodes_ablated)
from eval.core.circuit import INPUT, LOGITS, promote
from eval.core.graph import ComputationGraph

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
        return self._normalise(self.raw(kept))

    def betas_without(self, kept: Collection[str], removals: Sequence[Collection[str]]) -> list[float]:
        """β(kept minus r) for each r in removals, batched (eval.patching.ablation.node_metrics): the passes
        start at each removal's first block from the pass with everything outside `kept` ablated."""
        kept = set(kept)
        metric = "accuracy" if self.kind == "accuracy" else "logit_diff"
        ablated = [c for c in self.ctx.graph.components if c not in kept]
        raw = node_metrics(self.ctx, [[c for c in r if c in kept] for r in removals],
                           lambda logits: behaviour_tensor(self.ctx.task, logits, metric), base=ablated)
        return [self._normalise(v) for v in raw]

    def _normalise(self, value: float) -> float:
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
        # One batch per round: every candidate removal, each pass starting at its node's block.
        trials = [(b / base, c) for b, c in zip(nb.betas_without(keep, [[c] for c in keep]), keep)]
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
    cos_vacuous: bool = False
    """True when F < cos_threshold and COS = 1: greedy reduction may only remove a node while F
    stays >= the threshold, so an already unfaithful set keeps every node and reads as optimal."""
    composite_note: str = ""
    """The composite's small-graph caveat in words, stated beside every composite (COS_NOTE)."""


COS_NOTE = ("COS keeps nodes while greedy reduction holds F >= {t:g}; a set with F < {t:g} cannot be reduced "
            "and scores COS = 1, which lifts the composite of unfaithful sets (common on small graphs, where "
            "removing any one node drops F below {t:g})")
"""The composite's caveat; `{t}` is the COS faithfulness floor."""


DEFAULT_WEIGHTS = {"faithfulness": 1.0, "completeness": 1.0, "minimality": 1.0, "stability": 1.0,
                   "causal_optimality": 1.0}


def causal_bench(nb: NodeBehaviour, identified: Collection[str], *, stability: float | None,
                 weights: Mapping[str, float] | None = None, cos_threshold: float = 0.85) -> CausalBench:
    """Faithfulness, completeness, minimality, COS and the composite for one identified set."""
    from eval.core.metrics import weighted_harmonic

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
    vacuous = bool(s) and f < cos_threshold and cos == 1.0
    note = COS_NOTE.format(t=cos_threshold) + (f"; here F = {f:.3f} < {cos_threshold:g} and COS = 1" if vacuous else "")
    return CausalBench(identified=tuple(s), faithfulness=f, completeness=c, minimality=m, stability=stability,
                       causal_optimality=cos, composite=weighted_harmonic(values, w), weights=w,
                       behaviour=nb.kind, cos_vacuous=vacuous, composite_note=note)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MibCurve:
    """MIB §3.1 on the q/k/v edge graph: faithfulness f(C_k) of top-scored circuits, CPR and CMD.

    As MIB's evaluator (`evaluate_area_under_curve` with EAP-IG's `Graph.apply_topn(n, absolute,
    prune=True)`): C_k is the top floor(k·|E|) q/k/v edges, then pruned (`mib_prune`); every other
    edge is ablated; f = (m(C_k) - m(∅)) / (m(N) - m(∅)). A method's q/k/v edge scores rank its
    q/k/v edges separately; a head-level score (node methods, head-level edge methods) is copied to
    the three q/k/v edges it stands for.
    """

    sizes: tuple[float, ...]
    """Proportions k of the model's q/k/v-level edges."""
    n_edges: tuple[int, ...]
    """Edges selected for each circuit: floor(k · |E|), so |C_k| / |E| <= k."""
    n_kept_signed: tuple[int, ...]
    """Edges left in each signed-ranked circuit after pruning (what was actually kept)."""
    n_kept_abs: tuple[int, ...]
    """Edges left in each magnitude-ranked circuit after pruning."""
    f_signed: tuple[float, ...]
    """f with the highest *signed* scores kept (used for CPR)."""
    f_abs: tuple[float, ...]
    """f with the highest-magnitude scores kept (used for CMD)."""
    cpr: float
    """Trapezoid area under f_signed over k (the paper; MIB's evaluator default): higher is better."""
    cmd: float
    """Trapezoid area of |1 - f_abs| over k (the paper; MIB's evaluator default): 0 is best."""
    cpr_log: float
    """Trapezoid area under f_signed over ln k, as MIB's leaderboard evaluator computes it
    (run_evaluation.py with log_scale=True); not comparable in scale with `cpr`."""
    cmd_log: float
    """Trapezoid area of |1 - f_abs| over ln k (MIB's leaderboard evaluator)."""
    scores_from: Literal["qkv", "head"]
    """Whether the method's own scores told q, k and v apart, or head-level scores were copied."""
    pruned: bool
    """Whether circuits were pruned as MIB's evaluator prunes them."""


def qkv_scores(graph: ComputationGraph, edge_scores: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Scores of every q/k/v-level edge: a q/k/v-level score as given, else its head-level edge's
    score copied (a head edge into a head stands for its three q/k/v edges), else 0."""
    graph = graph.at("qkv")
    out = {e: 0.0 for e in graph.edges}
    exact = {}
    for edge, value in edge_scores.items():
        if edge in out and promote(edge[1]) != edge[1]:
            exact[edge] = float(value)
        else:
            for e in graph.expand_to_qkv((promote(edge[0]), promote(edge[1]))):
                out[e] = float(value)
    out.update(exact)  # a q/k/v score beats a copied head score, whatever the input order
    return out


def top_edges(scores: Mapping[tuple[str, str], float], n: int, *, absolute: bool) -> list[tuple[str, str]]:
    """The n highest-scoring edges (by |score| when absolute); ties keep the graph's forward order."""
    order = {e: i for i, e in enumerate(scores)}  # a dict, not list.index: linear, not quadratic
    key = (lambda e: (-abs(scores[e]), order[e])) if absolute else (lambda e: (-scores[e], order[e]))
    return sorted(scores, key=key)[:n]


def mib_prune(kept: Collection[tuple[str, str]]) -> set[tuple[str, str]]:
    """EAP-IG's `Graph.prune`: repeatedly drop nodes without a kept outgoing edge or without a kept
    incoming edge (any of a head's q/k/v inputs counts; `input` needs none, `logits` is always a
    valid receiver) and the edges of dropped nodes, until nothing changes."""
    edges = set(kept)
    while True:
        senders = {src for src, _ in edges}
        receivers = {promote(dst) for _, dst in edges} | {INPUT}
        alive = senders & receivers
        pruned = {(src, dst) for src, dst in edges if src in alive and (dst == LOGITS or promote(dst) in alive)}
        if pruned == edges:
            return edges
        edges = pruned


def mib_curve(ctx: AblationContext, edge_scores: Mapping[tuple[str, str], float],
              sizes: Sequence[float] = MIB_SIZES, *, prune: bool = True) -> MibCurve:
    """Faithfulness curve over circuit sizes on the q/k/v edge graph, CPR and CMD (class doc)."""
    graph: ComputationGraph = ctx.graph.at("qkv")
    scores = qkv_scores(graph, edge_scores)
    edges = list(scores)
    full = behaviour(ctx.task, run_edges_kept(ctx, edges))
    empty = behaviour(ctx.task, run_edges_kept(ctx, []))
    if abs(full - empty) < 1e-9:
        raise ValueError("ablating every edge leaves the metric unchanged; MIB faithfulness is undefined")
    n_edges = [int(np.floor(k * len(edges) + 1e-9)) for k in sizes]
    curves, kept_counts = [], []
    for absolute in (False, True):
        f, counts = [], []
        for n in n_edges:
            kept = top_edges(scores, n, absolute=absolute)
            kept = mib_prune(kept) if prune else set(kept)
            counts.append(len(kept))
            f.append((behaviour(ctx.task, run_edges_kept(ctx, kept)) - empty) / (full - empty))
        curves.append(f)
        kept_counts.append(counts)
    f_signed, f_abs = curves
    areas = {}
    for name, xs in (("lin", np.asarray(sizes, dtype=float)), ("log", np.log(np.asarray(sizes, dtype=float)))):
        areas[name] = (float(np.trapezoid(f_signed, xs)), float(np.trapezoid(np.abs(1 - np.asarray(f_abs)), xs)))
    given_qkv = any(promote(dst) != dst for _, dst in edge_scores)
    return MibCurve(sizes=tuple(sizes), n_edges=tuple(n_edges), n_kept_signed=tuple(kept_counts[0]),
                    n_kept_abs=tuple(kept_counts[1]), f_signed=tuple(f_signed), f_abs=tuple(f_abs),
                    cpr=areas["lin"][0], cmd=areas["lin"][1], cpr_log=areas["log"][0], cmd_log=areas["log"][1],
                    scores_from="qkv" if given_qkv else "head", pruned=prune)
