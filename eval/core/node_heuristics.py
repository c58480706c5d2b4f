"""Node activations and weights + ground truth -> how well non-interventional heuristics find the
circuit (InterpBench §5 realism; the realism issue's targets).

A realistic benchmark model must not give its circuit away to a method that never intervenes:
ranking nodes by how loud they are (mean output norm), how input-dependent (output variance across
inputs) or how large their weights are must do little better than chance. Each heuristic's node
AUROC against the circuit is reported with its *separation* max(AUROC, 1 - AUROC): a heuristic that
ranks the out-of-circuit nodes first gives the circuit away just as well.

Layouts follow TransformerLens: activations are per node [batch, pos, d_model] (a head's
`hook_z[:, :, h] @ W_O[h]`, an MLP's `hook_mlp_out`), weights come from a TL state dict.
Pure torch; imports no other package of the project but eval's own metrics.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Mapping
from typing import Any

import torch

from eval.core.circuit import head_node, mlp_node
from eval.core.metrics import roc

HEURISTICS = ("output_norm", "output_variance", "weight_norm")
"""The heuristics the realism targets bound (node AUROC separation <= 0.75)."""
EXTRA_HEURISTICS = ("output_weight_norm", "logit_variance", "variance_centrality")
"""Reported too: the norm of the weights that write into the residual stream; the variance of the
node's direct contribution to the logits (direct logit attribution; a known tell: strictness
forbids input-dependent writes onto the task logits by out-of-circuit nodes); and how close a
node's output variance is to the median node's (a known tell of the bound itself: a circuit that
every size heuristic must rank mid-pack sits nearer the middle than a random node)."""


def node_weights(state_dict: Mapping[str, torch.Tensor], n_layers: int, n_heads: int) -> dict[str, list[torch.Tensor]]:
    """The parameters that belong to each node of a TL state dict: a head's rows of W_Q, W_K, W_V,
    W_O and its biases; an MLP's W_in, b_in, W_out, b_out. (b_O is shared by a layer's heads.)"""
    out: dict[str, list[torch.Tensor]] = {}
    for layer in range(n_layers):
        a, m = f"blocks.{layer}.attn.", f"blocks.{layer}.mlp."
        for h in range(n_heads):
            out[head_node(layer, h)] = [state_dict[a + k][h] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")]
        out[mlp_node(layer)] = [state_dict[m + k] for k in ("W_in", "b_in", "W_out", "b_out")]
    return out


def _norm(tensors: list[torch.Tensor]) -> float:
    return float(torch.sqrt(sum((t.double() ** 2).sum() for t in tensors)))


def activation_stats(act: torch.Tensor, positions: torch.Tensor) -> tuple[float, float]:
    """(mean output norm, output variance across inputs) of one node.

    act [batch, pos, d]; positions bool [batch, pos] (real tokens). The variance is taken per
    position over the inputs in which that position is real, summed over d_model, and averaged over
    positions weighted by how many inputs have them.
    """
    act = act.double()
    w = positions.double()
    norm = float((act.norm(dim=-1) * w).sum() / w.sum().clamp(min=1))
    count = w.sum(0)  # [pos]
    mean = (act * w[..., None]).sum(0) / count.clamp(min=1)[:, None]
    var = (((act - mean) ** 2).sum(-1) * w).sum(0) / (count - 1).clamp(min=1)  # [pos]
    keep = count >= 2
    variance = float((var[keep] * count[keep]).sum() / count[keep].sum()) if keep.any() else 0.0
    return norm, variance


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeStats:
    """What a non-interventional method can see of one node."""

    node: str
    in_circuit: bool
    output_norm: float
    """Mean L2 norm of the node's output over real positions."""
    output_variance: float
    """Variance of the output across inputs (summed over d_model, averaged over positions)."""
    weight_norm: float
    """Frobenius norm of all the node's parameters."""
    output_weight_norm: float
    """Frobenius norm of W_O (head) or W_out (MLP): what writes into the residual stream."""
    logit_variance: float
    """Variance across inputs of the node's direct contribution to the logits (act @ W_U, centred
    over the outputs for classification)."""


def node_stats(acts: Mapping[str, torch.Tensor], positions: torch.Tensor, state_dict: Mapping[str, torch.Tensor],
               config: Mapping[str, Any], circuit: Collection[str], task_kind: str) -> list[NodeStats]:
    """NodeStats for every node in `acts` (node name -> [batch, pos, d_model])."""
    weights = node_weights(state_dict, int(config["n_layers"]), int(config["n_heads"]))
    w_u = state_dict["unembed.W_U"].double()
    rows = []
    for node, act in acts.items():
        norm, variance = activation_stats(act, positions)
        direct = act.double() @ w_u
        if task_kind == "classification":
            direct = direct - direct.mean(-1, keepdim=True)
        _, logit_var = activation_stats(direct, positions)
        out_w = weights[node][3] if node.startswith("a") else weights[node][2]
        rows.append(NodeStats(node=node, in_circuit=node in circuit, output_norm=norm, output_variance=variance,
                              weight_norm=_norm(weights[node]), output_weight_norm=_norm([out_w]),
                              logit_variance=logit_var))
    return rows


def heuristic_aurocs(rows: list[NodeStats]) -> dict[str, dict[str, float]]:
    """Per heuristic: node AUROC (larger value = more likely in the circuit) and its separation
    max(AUROC, 1 - AUROC). NaN when the circuit is empty or the whole model."""
    truth = {r.node for r in rows if r.in_circuit}
    log_var = {r.node: math.log(max(r.output_variance, 1e-12)) for r in rows}
    middle = statistics.median(log_var.values())
    centrality = {n: -abs(v - middle) for n, v in log_var.items()}
    out = {}
    for name in HEURISTICS + EXTRA_HEURISTICS:
        values = centrality if name == "variance_centrality" else {r.node: getattr(r, name) for r in rows}
        auroc = roc(values, truth).auroc
        out[name] = {"auroc": auroc, "separation": max(auroc, 1.0 - auroc)}
    return out


def variance_floor_ratio(rows: list[NodeStats]) -> float:
    """min over out-of-circuit nodes of output variance / the median circuit node's (target >= 0.25)."""
    inside = sorted(r.output_variance for r in rows if r.in_circuit)
    outside = [r.output_variance for r in rows if not r.in_circuit]
    if not inside or not outside:
        return float("nan")
    median = inside[len(inside) // 2] if len(inside) % 2 else 0.5 * (inside[len(inside) // 2 - 1] + inside[len(inside) // 2])
    return min(outside) / median if median > 0 else float("inf")


def realism_report(rows: list[NodeStats]) -> dict[str, Any]:
    """JSON-native realism section: per-node stats, heuristic AUROCs, the variance-floor ratio."""
    return {
        "heuristics": heuristic_aurocs(rows),
        "bounded_heuristics": list(HEURISTICS),
        "max_separation": max(heuristic_aurocs(rows)[h]["separation"] for h in HEURISTICS),
        "variance_floor_ratio": variance_floor_ratio(rows),
        "nodes": [dataclasses.asdict(r) for r in rows],
        "definitions": {
            "separation": "max(AUROC, 1 - AUROC) of ranking nodes by the heuristic against the circuit",
            "variance_floor_ratio": "min out-of-circuit output variance / median circuit-node output variance",
        },
    }
