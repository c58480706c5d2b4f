"""High-level (compiled) model -> low-level architecture and the node correspondence between them.

Low-level architecture (InterpBench's rule, REFERENCE.md, with wider heads): n_heads = max(4, hl
heads), d_head = max(ArchConfig.min_d_head (4), hl d_head // 2) - InterpBench's minimum is 1 -,
d_model = n_heads * d_head, d_mlp = 4 * d_model, n_layers = max(2, hl layers), gelu. Correspondence: a high-level head goes to a head of the same layer drawn at random
(seeded, distinct heads per layer), a high-level MLP to the MLP of the same layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from eval.core.circuit import INPUT, LOGITS, Circuit, head_node, mlp_node, node_sort_key, parse_node
from eval.core.tlens import hooked_config
from siit.config import ArchConfig, ConfigError


@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """The nodes of a model and their slots: node (l, s) is head s (s < n_heads) or the MLP (s = n_heads)."""

    n_layers: int
    n_heads: int

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node in forward order (a0.h0, ..., m0, a1.h0, ...)."""
        return tuple(self.name(l, s) for l in range(self.n_layers) for s in range(self.n_heads + 1))

    def name(self, layer: int, slot: int) -> str:
        return mlp_node(layer) if slot == self.n_heads else head_node(layer, slot)

    def slot(self, node: str) -> tuple[int, int]:
        parsed = parse_node(node)
        if parsed.kind == "mlp" and parsed.layer < self.n_layers:
            return parsed.layer, self.n_heads
        if parsed.kind == "head" and parsed.layer < self.n_layers and parsed.head < self.n_heads and not parsed.qkv:
            return parsed.layer, parsed.head
        raise ValueError(f"{node!r} is not a node of a {self.n_layers}-layer, {self.n_heads}-head model")

    def mask(self, nodes: Sequence[str]) -> torch.Tensor:
        """bool [n_layers, n_heads + 1] with the given nodes set."""
        out = torch.zeros(self.n_layers, self.n_heads + 1, dtype=torch.bool)
        for node in nodes:
            out[self.slot(node)] = True
        return out


def low_level_config(hl_config: Mapping[str, Any], arch: ArchConfig) -> dict[str, Any]:
    """HookedTransformerConfig fields of the low-level model for a compiled high-level model."""
    n_heads = arch.n_heads or max(4, hl_config["n_heads"])
    n_layers = arch.n_layers or max(2, hl_config["n_layers"])
    d_head = arch.d_head or max(arch.min_d_head, hl_config["d_head"] // 2)
    if n_heads < hl_config["n_heads"] or n_layers < hl_config["n_layers"]:
        raise ConfigError(
            f"the low-level model needs at least the high-level model's {hl_config['n_layers']} layers "
            f"and {hl_config['n_heads']} heads per layer"
        )
    d_model = n_heads * d_head
    return hooked_config(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_head=d_head,
        d_mlp=arch.d_mlp or 4 * d_model, d_vocab=hl_config["d_vocab"],
        d_vocab_out=hl_config["d_vocab_out"], n_ctx=hl_config["n_ctx"],
        causal=hl_config["attention_dir"] == "causal", act_fn=arch.act_fn,
    )


@dataclasses.dataclass(frozen=True)
class Correspondence:
    """Which low-level nodes implement each high-level node (InterpBench's alignment Π)."""

    mapping: Mapping[str, tuple[str, ...]]
    """High-level node -> low-level nodes, in the high-level graph's node order."""
    high: NodeLayout
    low: NodeLayout
    joint: tuple[tuple[str, ...], ...] = ()
    """Groups of high-level nodes that IIT also interchanges together, each judged by IIA like a node
    (a redundant circuit, planted.failure_modes' redundancy: no single copy's interchange changes the
    output, two copies' do, so only a joint interchange trains what the copies carry)."""

    def __post_init__(self) -> None:
        for group in self.joint:
            unknown = [n for n in group if n not in self.mapping]
            if unknown or len(set(group)) < 2:
                raise ValueError(f"joint interchange {group}: needs two or more distinct high-level nodes "
                                 f"of the correspondence (unknown: {unknown})")

    @property
    def high_nodes(self) -> tuple[str, ...]:
        return tuple(self.mapping)

    @property
    def interventions(self) -> tuple[str, ...]:
        """The interchanges IIT draws and IIA judges: every high-level node alone, then each joint
        group, named by its nodes joined with `+` (e.g. `a0.h0+a0.h1`)."""
        return self.high_nodes + tuple("+".join(group) for group in self.joint)

    def selects(self) -> torch.Tensor:
        """bool [n_interventions, n_high_nodes]: row i the high-level nodes intervention i takes
        from the source (a HighLevelModel's `select`)."""
        nodes = self.high_nodes
        rows = torch.eye(len(nodes), dtype=torch.bool)
        joint = [torch.tensor([n in group for n in nodes]) for group in self.joint]
        return torch.cat([rows, torch.stack(joint)]) if joint else rows

    @property
    def aligned(self) -> tuple[str, ...]:
        """Low-level nodes aligned with some high-level node (the circuit), forward order."""
        return tuple(sorted({n for nodes in self.mapping.values() for n in nodes}, key=node_sort_key))

    @property
    def non_aligned(self) -> tuple[str, ...]:
        """Low-level nodes aligned with no high-level node: what strictness trains to be inert."""
        aligned = set(self.aligned)
        return tuple(n for n in self.low.nodes if n not in aligned)

    def low_masks(self) -> torch.Tensor:
        """bool [n_interventions, ll layers, ll heads + 1]: row i intervenes on Π of intervention i's
        high-level node(s)."""
        return torch.stack([self.low.mask([ll for n in group for ll in self.mapping[n]]) for group in self._groups()])

    def _groups(self) -> list[tuple[str, ...]]:
        return [(n,) for n in self.mapping] + list(self.joint)

    def map_circuit(self, graph: Circuit) -> Circuit:
        """The high-level graph mapped onto low-level nodes (head granularity)."""
        lift = lambda n: (n,) if n in (INPUT, LOGITS) else self.mapping[n]  # noqa: E731
        edges = {(s, d) for src, dst in graph.edges for s in lift(src) for d in lift(dst)}
        labels = {ll: graph.labels.get(hl, "") for hl, lls in self.mapping.items() for ll in lls}
        return Circuit.build(self.aligned, edges, labels, "head")

    def to_json(self) -> dict[str, list[str]]:
        return {hl: list(lls) for hl, lls in self.mapping.items()}


def make_correspondence(
    graph: Circuit, hl_config: Mapping[str, Any], ll_config: Mapping[str, Any], seed: int
) -> Correspondence:
    """Same layer; high-level heads -> distinct low-level heads drawn with `seed`; MLP -> MLP."""
    high = NodeLayout(hl_config["n_layers"], hl_config["n_heads"])
    low = NodeLayout(ll_config["n_layers"], ll_config["n_heads"])
    rng = np.random.default_rng(seed)
    # one permutation per layer: distinct high-level heads land on distinct low-level heads
    perms = [rng.permutation(low.n_heads) for _ in range(high.n_layers)]
    mapping: dict[str, tuple[str, ...]] = {}
    for node in graph.nodes:
        parsed = parse_node(node)
        if parsed.kind == "mlp":
            mapping[node] = (mlp_node(parsed.layer),)
        else:
            mapping[node] = (head_node(parsed.layer, int(perms[parsed.layer][parsed.head])),)
    return Correspondence(mapping=mapping, high=high, low=low)
