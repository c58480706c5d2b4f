"""A HookedTransformer's shape -> its computation graph with DESIGN.md names.

Sources write the residual stream: `input`, `a{l}.h{h}`, `m{l}`. Readers: a head (whole, or its
q/k/v inputs `a{l}.h{h}<q>`), `m{l}`, `logits`. Every earlier writer feeds every later reader; the
MLP of layer l also reads the heads of layer l. At q/k/v granularity the edge count equals MIB's
formula (3H+1)(L + N·L(L-1)/2) + H·L + 1 + L·N with N = H + 1 (1108 for 6 layers x 4 heads).
Stdlib only: the CLI and score-file checks use it without importing torch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from eval.core.circuit import INPUT, LOGITS, Granularity, head_node, mlp_node, parse_node, promote

QKV = ("q", "k", "v")


def mib_edge_count(n_layers: int, n_heads: int) -> int:
    """MIB's edge count for a q/k/v-split graph (REFERENCE.md, Metrics)."""
    L, H = n_layers, n_heads
    N = H + 1
    return (3 * H + 1) * (L + N * L * (L - 1) // 2) + H * L + 1 + L * N


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputationGraph:
    """Every node and edge of a transformer of a given shape, at one granularity."""

    n_layers: int
    """Number of transformer blocks."""
    n_heads: int
    """Attention heads per block."""
    granularity: Granularity = "head"
    """"head": an edge ends at a whole head; "qkv": it ends at the head's <q>, <k> or <v> input."""

    @functools.cached_property
    def components(self) -> tuple[str, ...]:
        """Heads and MLPs in forward order (head-level names): the nodes a circuit selects from."""
        out: list[str] = []
        for layer in range(self.n_layers):
            out += [head_node(layer, h) for h in range(self.n_heads)]
            out.append(mlp_node(layer))
        return tuple(out)

    @functools.cached_property
    def edges(self) -> tuple[tuple[str, str], ...]:
        """All (src, dst) edges in forward order of the destination."""
        out: list[tuple[str, str]] = []
        written: list[str] = [INPUT]
        for layer in range(self.n_layers):
            heads = [head_node(layer, h) for h in range(self.n_heads)]
            for h in range(self.n_heads):
                dsts = [head_node(layer, h, x) for x in QKV] if self.granularity == "qkv" else [heads[h]]
                out += [(src, dst) for dst in dsts for src in written]
            out += [(src, mlp_node(layer)) for src in written + heads]
            written += heads + [mlp_node(layer)]
        out += [(src, LOGITS) for src in written]
        return tuple(out)

    @functools.cached_property
    def edge_set(self) -> frozenset[tuple[str, str]]:
        return frozenset(self.edges)

    @functools.cached_property
    def known_edges(self) -> frozenset[tuple[str, str]]:
        """Every edge name at either granularity (what check_edge accepts), built once per graph."""
        return self.at("qkv").edge_set | self.at("head").edge_set

    @functools.cached_property
    def head_edges(self) -> tuple[tuple[str, str], ...]:
        """The edges promoted to head granularity (what ground truth is labelled at)."""
        return tuple(dict.fromkeys((promote(s), promote(d)) for s, d in self.edges))

    def at(self, granularity: Granularity) -> ComputationGraph:
        return dataclasses.replace(self, granularity=granularity)

    def check_node(self, name: str) -> str:
        """`name` if it is a node of this graph (q/k/v suffixes allowed), else ValueError."""
        node = parse_node(name)
        if node.kind in ("input", "logits"):
            return name
        ok = 0 <= node.layer < self.n_layers and (node.kind == "mlp" or 0 <= node.head < self.n_heads)
        if not ok:
            raise ValueError(
                f"node {name!r} is not in the model ({self.n_layers} layers x {self.n_heads} heads)"
            )
        return name

    def check_edge(self, src: str, dst: str) -> tuple[str, str]:
        """(src, dst) if it is an edge of this graph at either granularity, else ValueError."""
        self.check_node(src), self.check_node(dst)
        if (src, dst) in self.known_edges:
            return src, dst
        raise ValueError(f"edge {src}->{dst} is not in the model's graph (a writer must precede its reader)")

    def expand_to_qkv(self, edge: tuple[str, str]) -> list[tuple[str, str]]:
        """A head-level edge into a head -> its three q/k/v edges; other edges unchanged."""
        src, dst = edge
        node = parse_node(dst)
        if node.kind == "head" and node.qkv is None:
            return [(src, head_node(node.layer, node.head, x)) for x in QKV]
        return [edge]

    def to_json(self) -> dict[str, Any]:
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "granularity": self.granularity,
                "components": len(self.components), "edges": len(self.edges)}


def graph_of(model_or_config: Any, granularity: Granularity = "head") -> ComputationGraph:
    """The graph of a HookedTransformer, its cfg, or a config dict."""
    cfg = getattr(model_or_config, "cfg", model_or_config)
    get = cfg.get if isinstance(cfg, Mapping) else lambda k: getattr(cfg, k)
    return ComputationGraph(n_layers=int(get("n_layers")), n_heads=int(get("n_heads")), granularity=granularity)


def promote_scores(scores: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Edge scores at q/k/v level -> head level: the score of largest magnitude wins (signed)."""
    out: dict[tuple[str, str], float] = {}
    for (src, dst), value in scores.items():
        key = (promote(src), promote(dst))
        if key not in out or abs(value) > abs(out[key]):
            out[key] = float(value)
    return out


def promote_node_scores(scores: Mapping[str, float]) -> dict[str, float]:
    """Node scores with q/k/v names -> head names, largest magnitude wins."""
    out: dict[str, float] = {}
    for name, value in scores.items():
        key = promote(name)
        if key not in out or abs(value) > abs(out[key]):
            out[key] = float(value)
    return out


def nodes_to_edge_scores(graph: ComputationGraph, node_scores: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """Edge scores for a node-level method: the endpoint with the smaller magnitude decides.

    `input` and `logits` carry no score of their own, so an edge touching one takes the other
    endpoint's score; `input->logits` (no component) gets 0.
    """
    out: dict[tuple[str, str], float] = {}
    for src, dst in graph.at("head").edges:
        ends = [node_scores.get(n, 0.0) for n in (src, dst) if n not in (INPUT, LOGITS)]
        out[(src, dst)] = min(ends, key=abs) if ends else 0.0
    return out


def edges_to_node_scores(graph: ComputationGraph, edge_scores: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Node scores for an edge-level method: the incident edge of largest magnitude."""
    out = {n: 0.0 for n in graph.components}
    for (src, dst), value in promote_scores(edge_scores).items():
        for end in (src, dst):
            if end in out and abs(value) > abs(out[end]):
                out[end] = float(value)
    return out


def circuit_edges(graph: ComputationGraph, nodes: Iterable[str]) -> set[tuple[str, str]]:
    """Head-level edges among a node set (with input and logits): a node circuit as edges."""
    keep = {promote(n) for n in nodes} | {INPUT, LOGITS}
    return {(s, d) for s, d in graph.at("head").edges if s in keep and d in keep}
