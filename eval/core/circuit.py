"""Node and edge names (MIB / EAP-IG compatible) and the `Circuit` record.

Nodes: `input`, `a{l}.h{h}` (head h of layer l), `m{l}` (MLP of layer l), `logits`.
A head's input may carry a suffix `<q>`, `<k>` or `<v>`; ground truth is labelled at head
granularity, so such names are promoted to the head before comparing.
Edges: `"{src}->{dst}"` in files, `(src, dst)` tuples in code.
This module imports nothing heavy: the CLI and every package use it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

INPUT = "input"
LOGITS = "logits"
Granularity = Literal["head", "qkv"]
TaskKind = Literal["classification", "regression"]
"""What a model's output is judged as: the argmax class, or one number (logits[..., 0])."""

_NODE_RE = re.compile(r"^(?:a(?P<al>\d+)\.h(?P<h>\d+)(?:<(?P<qkv>[qkv])>)?|m(?P<ml>\d+))$")


def head_node(layer: int, head: int, qkv: str | None = None) -> str:
    return f"a{layer}.h{head}" + (f"<{qkv}>" if qkv else "")


def mlp_node(layer: int) -> str:
    return f"m{layer}"


@dataclasses.dataclass(frozen=True)
class NodeName:
    """A parsed node name."""

    kind: Literal["input", "head", "mlp", "logits"]
    layer: int = -1
    head: int = -1
    qkv: str | None = None

    @property
    def promoted(self) -> str:
        """The head-granularity name (`a2.h0<k>` -> `a2.h0`)."""
        if self.kind == "head":
            return head_node(self.layer, self.head)
        if self.kind == "mlp":
            return mlp_node(self.layer)
        return self.kind


@functools.lru_cache(maxsize=1 << 16)
def parse_node(name: str) -> NodeName:
    """Parse a node name; raises ValueError for anything that is not a valid name. Cached (NodeName
    is frozen): batched edge patching and ACDC look names up ~10⁶ times per run."""
    if name == INPUT:
        return NodeName("input")
    if name == LOGITS:
        return NodeName("logits")
    match = _NODE_RE.match(name)
    if not match:
        raise ValueError(f"not a node name: {name!r} (expected input, a<l>.h<h>, m<l> or logits)")
    if match["ml"] is not None:
        return NodeName("mlp", layer=int(match["ml"]))
    return NodeName("head", layer=int(match["al"]), head=int(match["h"]), qkv=match["qkv"])


def promote(name: str) -> str:
    """Promote a q/k/v-level node name to its head; other names are returned unchanged."""
    return parse_node(name).promoted


def node_sort_key(name: str) -> tuple[float, int, int]:
    """Order nodes as the forward pass visits them: input, then per layer heads, MLP; logits."""
    node = parse_node(name)
    if node.kind == "input":
        return (-1.0, 0, 0)
    if node.kind == "logits":
        return (float("inf"), 0, 0)
    if node.kind == "head":
        return (float(node.layer), 0, node.head)
    return (node.layer + 0.5, 0, 0)


def edge_name(src: str, dst: str) -> str:
    return f"{src}->{dst}"


def parse_edge(name: str) -> tuple[str, str]:
    src, sep, dst = name.partition("->")
    if not sep:
        raise ValueError(f"not an edge name: {name!r} (expected 'src->dst')")
    parse_node(src), parse_node(dst)
    return src, dst


@dataclasses.dataclass(frozen=True)
class Circuit:
    """A set of component nodes and the edges between them (plus `input` / `logits`)."""

    nodes: tuple[str, ...]
    """Component nodes (heads and MLPs) in forward order; `input` and `logits` are implicit."""
    edges: tuple[tuple[str, str], ...]
    """Directed edges (src, dst); endpoints are nodes of the circuit, `input` or `logits`."""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """What each node computes (e.g. the RASP expression), for people reading the circuit."""
    granularity: Granularity = "head"
    """"head": nodes are whole heads; "qkv": head inputs may be split into <q>, <k>, <v>."""

    def __post_init__(self) -> None:
        for node in self.nodes:
            parsed = parse_node(node)
            if parsed.kind in ("input", "logits"):
                raise ValueError(f"{node!r} is implicit and must not be listed as a node")
            if self.granularity == "head" and parsed.qkv:
                raise ValueError(f"{node!r} has a q/k/v suffix in a head-granularity circuit")
        allowed = set(self.nodes) | {INPUT, LOGITS}
        for src, dst in self.edges:
            for end in (src, dst):
                if end not in allowed:
                    raise ValueError(f"edge {src}->{dst}: {end!r} is not a node of the circuit")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("duplicate nodes in circuit")

    @classmethod
    def build(
        cls,
        nodes: Iterable[str],
        edges: Iterable[tuple[str, str]],
        labels: Mapping[str, str] | None = None,
        granularity: Granularity = "head",
    ) -> Circuit:
        """A circuit with nodes and edges sorted into forward order and duplicates removed."""
        node_list = sorted(set(nodes), key=node_sort_key)
        edge_list = sorted(
            set(edges), key=lambda e: (node_sort_key(e[1]), node_sort_key(e[0]))
        )
        return cls(tuple(node_list), tuple(edge_list), dict(labels or {}), granularity)

    def promoted(self) -> Circuit:
        """The head-granularity circuit: q/k/v nodes and edge endpoints promoted to heads."""
        nodes = {promote(n) for n in self.nodes}
        edges = {(promote(s), promote(d)) for s, d in self.edges}
        labels = {promote(n): v for n, v in self.labels.items()}
        return Circuit.build(nodes, edges, labels, "head")

    def edge_names(self) -> list[str]:
        return [edge_name(s, d) for s, d in self.edges]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "granularity": self.granularity,
            "nodes": list(self.nodes),
            "edges": [[s, d] for s, d in self.edges],
            "labels": dict(self.labels),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Circuit:
        if data.get("schema_version") != 1:
            raise ValueError(f"unsupported circuit schema_version {data.get('schema_version')!r}")
        return cls(
            nodes=tuple(data["nodes"]),
            edges=tuple((str(s), str(d)) for s, d in data["edges"]),
            labels=dict(data.get("labels", {})),
            granularity=data.get("granularity", "head"),
        )
