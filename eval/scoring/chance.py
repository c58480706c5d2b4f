"""A method's output kind + the graph + ground truth -> its chance line: the expected AUROC of
uniformly random scores of the same kind, put through the same rules the report applies.

Random node scores are 0.5 at node level, but not at edge level: an edge takes the endpoint score
of smaller magnitude (`eval.core.graph.nodes_to_edge_scores`), so edges that share an endpoint tie and
edges touching `input` / `logits` draw from one endpoint only. Random q/k/v edge scores are
promoted to a head edge by the largest magnitude of three (`promote_scores`), so edges into heads
beat edges into MLPs and logits. For scorers the expectation is exact (`eval.core.metrics.chance_auroc`);
for circuit methods (pessimistic AUROC over random circuits of the method's sizes) it is a seeded
Monte Carlo mean with its standard error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from eval.core.circuit import INPUT, LOGITS, promote
from eval.core.graph import ComputationGraph
from eval.core.metrics import chance_auroc

ChanceKind = Literal["node", "head", "qkv"]
RULES: Mapping[str, str] = {
    "node": "random node scores; an edge takes its endpoint score of smaller magnitude "
            "(input/logits have none; input->logits scores 0)",
    "head": "random head-level edge scores; a node takes its incident edge score of largest magnitude",
    "qkv": "random q/k/v edge scores; a head edge takes the largest magnitude of its q/k/v edges, "
           "a node the largest of its incident edges",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChanceLine:
    """Expected node and edge AUROC of a random scorer of one kind (uniform scores, |score| ranked)."""

    kind: ChanceKind
    """What the random scorer scores: components, head-level edges or q/k/v-level edges."""
    rule: str
    """How its scores reach the node and edge ROCs, in words."""
    node_auroc: float
    """Expected node AUROC (exact)."""
    edge_auroc: float
    """Expected head-level edge AUROC (exact)."""
    qkv_edge_auroc: float = float("nan")
    """Expected q/k/v-level edge AUROC (exact): a head-level score is copied to its three parts, a node
    score reaches a part through its head edge's smaller endpoint."""


def output_kind(node_scores: Mapping[str, float] | None,
                edge_scores: Mapping[tuple[str, str], float] | None) -> ChanceKind:
    """Which random scorer a method's output is compared with: nodes, or edges at the finest
    granularity the method used (any q/k/v destination makes it `qkv`)."""
    if node_scores is not None or edge_scores is None:
        return "node"
    return "qkv" if any(promote(dst) != dst for _, dst in edge_scores) else "head"


def chance_line(graph: ComputationGraph, truth_nodes: Collection[str],
                truth_edges: Collection[tuple[str, str]], kind: ChanceKind, *,
                exclude: Collection[tuple[str, str]] = (),
                exclude_qkv: Collection[tuple[str, str]] = ()) -> ChanceLine:
    """The chance line of `kind` on this graph and ground truth; `exclude`d head edges (inert
    ground truth, left out of the report's edge AUROC) are left out here too, as are the
    `exclude_qkv` parts at q/k/v level."""
    components = graph.components
    head_edges = graph.at("head").edges
    if kind == "node":
        ids = {c: i for i, c in enumerate(components)}
        node_draws = {c: frozenset([ids[c]]) for c in components}
        edge_draws = {e: frozenset(ids[n] for n in e if n not in (INPUT, LOGITS)) for e in head_edges}
    elif kind in ("head", "qkv"):
        draws_of_qkv: dict[tuple[str, str], list[int]] = {}
        edges = graph.at("qkv").edges if kind == "qkv" else head_edges
        for i, (src, dst) in enumerate(edges):
            draws_of_qkv.setdefault((promote(src), promote(dst)), []).append(i)
        edge_draws = {e: frozenset(draws_of_qkv[e]) for e in head_edges}
        incident: dict[str, set[int]] = {c: set() for c in components}
        for (src, dst), draws in edge_draws.items():
            for end in (src, dst):
                if end in incident:
                    incident[end] |= draws
        node_draws = {c: frozenset(v) for c, v in incident.items()}
    else:
        raise ValueError(f"unknown chance kind {kind!r}; allowed: node, head, qkv")
    edge_reduce = "min" if kind == "node" else "max"  # nodes_to_edge_scores keeps the smaller endpoint
    excluded = set(exclude)
    head_truth = {(promote(s), promote(d)) for s, d in truth_edges}
    return ChanceLine(kind=kind, rule=RULES[kind],
                      node_auroc=_split(node_draws, set(truth_nodes), "max"),
                      edge_auroc=_split({e: d for e, d in edge_draws.items() if e not in excluded},
                                        head_truth, edge_reduce),
                      qkv_edge_auroc=_qkv_chance(graph, edge_draws, head_truth, kind, set(exclude_qkv)))


def _qkv_chance(graph: ComputationGraph, edge_draws: Mapping, head_truth: set, kind: ChanceKind,
                excluded: set) -> float:
    """Expected q/k/v-level AUROC: a random q/k/v scorer draws one score per part; a head-level one
    shares its head edge's draw among the parts; a node-level one its head edge's endpoint draws (min)."""
    qkv_edges = [e for e in graph.at("qkv").edges if e not in excluded]
    if kind == "qkv":
        draws = {e: frozenset([i]) for i, e in enumerate(qkv_edges)}
    else:
        draws = {e: edge_draws[(promote(e[0]), promote(e[1]))] for e in qkv_edges}
    truth = {p for e in head_truth for p in graph.expand_to_qkv(e)}
    return chance_auroc([d for e, d in draws.items() if e in truth], [d for e, d in draws.items() if e not in truth],
                        reduce="min" if kind == "node" else "max")


def _split(draws: Mapping, truth: set, reduce: Literal["max", "min"]) -> float:
    return chance_auroc([d for k, d in draws.items() if k in truth], [d for k, d in draws.items() if k not in truth],
                        reduce=reduce)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CircuitChance:
    """Pessimistic AUROC of random circuits with the sizes a circuit method's runs had."""

    node_auroc: float
    """Mean node AUROC over the draws."""
    edge_auroc: float
    """Mean edge AUROC over the draws."""
    node_se: float
    """Monte-Carlo standard error of `node_auroc`."""
    edge_se: float
    """Monte-Carlo standard error of `edge_auroc`."""
    rule: str
    """What was drawn, how many times, with which seed."""


def circuit_chance(graph: ComputationGraph, truth_nodes: Collection[str], truth_edges: Collection[tuple[str, str]],
                   sizes: Sequence[tuple[int, int | None]], *, draws: int = 200, seed: int = 0,
                   exclude: Collection[tuple[str, str]] = ()) -> CircuitChance:
    """Seeded Monte Carlo: per draw, every run (n_nodes, n_edges or None) becomes a uniformly random
    node set of that size, with a random head-edge set of n_edges (or, for node-only runs, the
    edges among the drawn nodes, as the report scores them); the runs' points give one pessimistic
    AUROC. No closed form: the staircase takes maxima over runs. `exclude`d head edges (inert ground
    truth) are drawn as the report draws them but left out of the edge points, as the report does."""
    import numpy as np

    from eval.core.metrics import pessimistic_auroc

    comps = list(graph.components)
    head_edges = graph.at("head").edges
    ends = {c: i for i, c in enumerate(comps)}
    always = len(comps)  # input and logits are in every circuit
    src = np.array([ends.get(s, always) for s, _ in head_edges])
    dst = np.array([ends.get(d, always) for _, d in head_edges])
    node_truth = np.array([c in set(truth_nodes) for c in comps])
    edge_truth = np.array([e in set(truth_edges) for e in head_edges])
    excluded = set(exclude)
    scored = np.array([e not in excluded for e in head_edges])
    rng = np.random.default_rng(seed)
    node_aurocs, edge_aurocs = [], []
    for _ in range(draws):
        node_pts, edge_pts = [], []
        for n_nodes, n_edges in sizes:
            keep = np.zeros(len(comps) + 1, dtype=bool)
            keep[rng.choice(len(comps), size=n_nodes, replace=False)] = True
            keep[always] = True
            if n_edges is None:
                chosen = keep[src] & keep[dst]
            else:
                chosen = np.zeros(len(head_edges), dtype=bool)
                chosen[rng.choice(len(head_edges), size=n_edges, replace=False)] = True
            node_pts.append(_point(keep[:-1], node_truth))
            edge_pts.append(_point(chosen[scored], edge_truth[scored]))
        node_aurocs.append(pessimistic_auroc(node_pts).auroc)
        edge_aurocs.append(pessimistic_auroc(edge_pts).auroc)
    se = lambda xs: float(np.std(xs, ddof=1) / np.sqrt(len(xs))) if len(xs) > 1 else float("nan")  # noqa: E731
    return CircuitChance(
        node_auroc=float(np.mean(node_aurocs)), edge_auroc=float(np.mean(edge_aurocs)),
        node_se=se(node_aurocs), edge_se=se(edge_aurocs),
        rule=f"random circuits of the method's sizes ({len(sizes)} runs), pessimistic AUROC, "
             f"Monte Carlo over {draws} draws (seed {seed}); ± is the standard error")


def _point(chosen, truth) -> tuple[float, float]:
    pos, neg = int(truth.sum()), int((~truth).sum())
    tpr = float((chosen & truth).sum() / pos) if pos else float("nan")
    fpr = float((chosen & ~truth).sum() / neg) if neg else float("nan")
    return fpr, tpr
