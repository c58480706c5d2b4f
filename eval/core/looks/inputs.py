"""One clean run of a model (node outputs, attention patterns, gradients of its own output) and its
weights -> `LookInputs`, what every look of the battery reads.

Layouts are siit.transformer's (TransformerLens's parameterisation): node outputs of layer l stacked
as [batch, pos, n_heads + 1, d_model], slots 0..H-1 each head's output (its z @ W_O, before b_O) and
slot H the MLP's output; weights under TransformerLens state-dict names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from eval.core.circuit import TaskKind, head_node, mlp_node


@dataclasses.dataclass(frozen=True, kw_only=True)
class LookInputs:
    """What a researcher who never intervenes can see of a model on a sample of inputs."""

    config: Mapping[str, Any]
    """The model's TransformerLens config (n_layers, n_heads, d_model, d_head, ...)."""
    state_dict: Mapping[str, torch.Tensor]
    """Its weights, TransformerLens names (blocks.{l}.attn.W_Q [H, d_model, d_head], ..., unembed.W_U)."""
    acts: torch.Tensor
    """[n_layers, batch, pos, n_heads + 1, d_model]: node outputs of the clean run."""
    grads: torch.Tensor
    """[n_layers, batch, pos, n_heads + 1, d_model]: gradient of `readout_of` the clean run with
    respect to each node's output (one backward)."""
    patterns: torch.Tensor
    """[n_layers, batch, n_heads, query pos, key pos]: attention patterns of the clean run."""
    positions: torch.Tensor
    """bool [batch, pos]: real positions (BOS and input; not PAD)."""
    label_positions: torch.Tensor
    """bool [batch, pos]: positions that carry the task's output."""
    labels: torch.Tensor
    """[batch, pos]: the model's own output there (class ids, or values for regression); equal to the
    task label on an entry of accuracy 1.0."""
    task_kind: TaskKind
    circuit: frozenset[str]
    """The ground-truth nodes (`a{l}.h{h}`, `m{l}`)."""

    def __post_init__(self) -> None:
        L, H = int(self.config["n_layers"]), int(self.config["n_heads"])
        B, T = self.positions.shape
        want = (L, B, T, H + 1, int(self.config["d_model"]))
        for name in ("acts", "grads"):
            if tuple(getattr(self, name).shape) != want:
                raise ValueError(f"{name} must be {want}, got {tuple(getattr(self, name).shape)}")
        if tuple(self.patterns.shape) != (L, B, H, T, T):
            raise ValueError(f"patterns must be {(L, B, H, T, T)}, got {tuple(self.patterns.shape)}")
        if tuple(self.label_positions.shape) != (B, T) or tuple(self.labels.shape) != (B, T):
            raise ValueError("label_positions and labels must be [batch, pos] like positions")
        if not bool(self.label_positions.any()):
            raise ValueError("no position carries a label")
        unknown = set(self.circuit) - set(self.nodes)
        if unknown:
            raise ValueError(f"circuit nodes not in the model: {sorted(unknown)}")

    @property
    def n_layers(self) -> int:
        return int(self.config["n_layers"])

    @property
    def n_heads(self) -> int:
        return int(self.config["n_heads"])

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node, in the stacked order: layer by layer, heads then the MLP."""
        return tuple(head_node(l, h) if h < self.n_heads else mlp_node(l)
                     for l in range(self.n_layers) for h in range(self.n_heads + 1))

    def node_acts(self) -> dict[str, torch.Tensor]:
        """node -> its output [batch, pos, d_model] (float64)."""
        return self._per_node(self.acts)

    def node_grads(self) -> dict[str, torch.Tensor]:
        """node -> the gradient at its output [batch, pos, d_model] (float64)."""
        return self._per_node(self.grads)

    def _per_node(self, stacked: torch.Tensor) -> dict[str, torch.Tensor]:
        return {node: stacked[i // (self.n_heads + 1), :, :, i % (self.n_heads + 1)].double()
                for i, node in enumerate(self.nodes)}
