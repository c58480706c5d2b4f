"""A high-level causal model -> what (S)IIT trains from; the compiled Tracr model is one adapter.

Two protocols:
- `HighLevelModel`: named nodes, `run(tokens, mask) -> (labels, node values)` and
  `interchange(tokens, mask, source values, select) -> labels`, where `select` names the nodes to
  take from the source (bool over `nodes`). Node values are one tensor with the batch on dim 1
  ([*, N, T, ...]); its layout is the model's own business, so siit only ever indexes dim 1.
- `HighLevelTask`: the task around it (case: id, task kind, seeded sampler, metadata; encoding:
  encode / to_json; graph: the high-level circuit), the low-level architecture and the mapping
  high-level node -> low-level nodes (`correspondence`).

`TracrTask` adapts a compiled RASP case (anything with case, encoding, graph, config, state_dict):
its high-level model is the Tracr weights in `siit.transformer.Transformer`, nodes are its heads
and MLPs, values its node activations [hl layers, N, T, hl heads + 1, d]. It computes exactly what
siit computed before the protocol existed (same calls, same order), so trained weights are
bit-identical. Hand-written models (package `planted`) implement `HighLevelTask` directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from eval.core.circuit import Circuit, TaskKind
from siit.config import ArchConfig
from siit.correspondence import Correspondence, NodeLayout, low_level_config, make_correspondence
from siit.interventions import interchange as patch_run
from siit.losses import targets_from_logits
from siit.transformer import Transformer


@runtime_checkable
class HighLevelModel(Protocol):
    """A causal model over named nodes whose outputs are the task's labels."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """Node names, in the order `select` masks use."""
        ...

    @property
    def task_kind(self) -> TaskKind:
        ...

    def run(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """labels [N, T] (class ids, long; or values, float) and node values [*, N, T, ...]."""
        ...

    def interchange(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                    select: torch.Tensor) -> torch.Tensor:
        """labels [N, T] of the base inputs with the selected nodes set to `source_values`
        ([*, N or 1, T, ...], as `run` returns them). select: bool [n_nodes] (every row) or [N, n_nodes]."""
        ...


@runtime_checkable
class HighLevelTask(Protocol):
    """Everything siit.train needs besides its TrainConfig."""

    case: Any
    """id, task_kind, sample(n, seed) -> input sequences, metadata() -> JSON (case.json)."""
    encoding: Any
    """encode(seqs) -> (tokens [N, n_ctx], mask [N, n_ctx]); to_json()."""
    graph: Circuit
    """The high-level graph; its nodes are the high-level model's nodes."""

    def high_level(self) -> HighLevelModel:
        ...

    def low_level_config(self, arch: ArchConfig) -> dict[str, Any]:
        """HookedTransformerConfig fields of the low-level model."""
        ...

    def correspondence(self, low_config: Mapping[str, Any], seed: int) -> Correspondence:
        """High-level node -> low-level nodes; `seed` draws whatever is drawn (which heads)."""
        ...


def selection_rows(n_nodes: int) -> torch.Tensor:
    """bool [n_nodes, n_nodes]: row i selects node i alone."""
    return torch.eye(n_nodes, dtype=torch.bool)


TIE_MARGIN = 1e-4
"""Relative margin below which a compiled model's top two logits count as tied (TracrHighLevel.interchange_ties)."""


class TracrHighLevel:
    """The compiled model as a HighLevelModel: node i is the head / MLP slots of node_masks[i]."""

    def __init__(self, model: Transformer, node_masks: torch.Tensor, nodes: Sequence[str],
                 task_kind: TaskKind) -> None:
        self.model = model
        self.node_masks = node_masks  # bool [n_nodes, hl layers, hl heads + 1]
        self._nodes = tuple(nodes)
        self._task_kind = task_kind

    @property
    def nodes(self) -> tuple[str, ...]:
        return self._nodes

    @property
    def task_kind(self) -> TaskKind:
        return self._task_kind

    def run(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            logits, acts = self.model(tokens, mask, return_acts=True)
        return targets_from_logits(logits, self._task_kind), acts

    def layer_mask(self, select: torch.Tensor) -> torch.Tensor:
        """select bool [n_nodes] or [N, n_nodes] -> slot mask [L, S] or [N, L, S]."""
        return (select[..., None, None] & self.node_masks).any(dim=-3)

    def interchange(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                    select: torch.Tensor) -> torch.Tensor:
        return targets_from_logits(self._interchange_logits(tokens, mask, source_values, select), self._task_kind)

    def _interchange_logits(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                            select: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return patch_run(self.model, tokens, mask, source_values, self.layer_mask(select))

    def interchange_ties(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                         select: torch.Tensor) -> torch.Tensor:
        """bool [N, T]: positions where `interchange`'s label is a tie of the compiled model (its top
        two logits within TIE_MARGIN of the largest logit, at least TIE_MARGIN): the label is then
        argmax's tie-break or float noise, not the program's output (siit.validation reports them)."""
        logits = self._interchange_logits(tokens, mask, source_values, select)
        if self._task_kind != "classification":
            return torch.zeros(logits.shape[:2], dtype=torch.bool, device=logits.device)
        top = logits.topk(2, dim=-1).values
        return (top[..., 0] - top[..., 1]) < TIE_MARGIN * logits.abs().amax(-1).clamp(min=1.0)


class TracrTask:
    """A compiled RASP case as a HighLevelTask (InterpBench's architecture and correspondence rules,
    siit.correspondence)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.case = compiled.case
        self.encoding = compiled.encoding
        self.graph = compiled.graph

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout(self.compiled.config["n_layers"], self.compiled.config["n_heads"])

    def high_level(self) -> TracrHighLevel:
        model = Transformer.from_state_dict(self.compiled.config, self.compiled.state_dict)
        masks = torch.stack([self.layout.mask([n]) for n in self.graph.nodes]) if self.graph.nodes else \
            torch.zeros(0, *self.layout.mask([]).shape, dtype=torch.bool)
        return TracrHighLevel(model, masks, self.graph.nodes, self.case.task_kind)

    def low_level_config(self, arch: ArchConfig) -> dict[str, Any]:
        return low_level_config(self.compiled.config, arch)

    def correspondence(self, low_config: Mapping[str, Any], seed: int) -> Correspondence:
        return make_correspondence(self.graph, self.compiled.config, low_config, seed)


def as_task(obj: Any) -> HighLevelTask:
    """`obj` itself if it is a HighLevelTask, else a compiled case wrapped in TracrTask."""
    return obj if hasattr(obj, "high_level") else TracrTask(obj)


def as_high_level(high: Any, task_kind: TaskKind, node_masks: torch.Tensor | None = None,
                  nodes: Sequence[str] = ()) -> HighLevelModel:
    """A HighLevelModel unchanged; a bare compiled Transformer wrapped (callers that predate the
    protocol pass one, with its nodes as slot masks)."""
    if isinstance(high, Transformer):
        if node_masks is None:
            node_masks = torch.zeros(0, high.n_layers, high.n_heads + 1, dtype=torch.bool)
        return TracrHighLevel(high, node_masks, nodes, task_kind)
    return high
