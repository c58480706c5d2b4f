"""LookInputs -> per-node values of the looks that read weights only.

The zoo's head rescale (siit.reparametrize) moves scale between W_Q and W_K and between W_V and W_O,
so the per-head weight norm tells little by design; the products W_Q W_Kᵀ and W_V W_O, and every
*normalised* composition below, do not change under it, which is why a careful reader looks at them.
"""

from __future__ import annotations

import torch

from eval.core.looks.inputs import LookInputs
from eval.core.node_heuristics import node_weights


def _weights(x: LookInputs) -> dict[str, list[torch.Tensor]]:
    return node_weights(x.state_dict, x.n_layers, x.n_heads)


def weight_norm(x: LookInputs) -> dict[str, float]:
    """Frobenius norm of all the node's parameters together (eval.core.node_heuristics)."""
    return {n: float(torch.sqrt(sum((t.double() ** 2).sum() for t in ts))) for n, ts in _weights(x).items()}


def weight_norm_sum(x: LookInputs) -> dict[str, float]:
    """Sum of the Frobenius norms of the node's parameter tensors, one by one."""
    return {n: float(sum(t.double().norm() for t in ts)) for n, ts in _weights(x).items()}


def _head(x: LookInputs, name: str, layer: int) -> torch.Tensor:
    return x.state_dict[f"blocks.{layer}.attn.{name}"].double()


def qk_norm(x: LookInputs) -> dict[str, float]:
    """Heads only: ‖W_Q W_Kᵀ‖_F, the bilinear form that makes the pattern (gauge-invariant)."""
    out = {}
    for l in range(x.n_layers):
        q, k = _head(x, "W_Q", l), _head(x, "W_K", l)
        for h in range(x.n_heads):
            out[x.nodes[l * (x.n_heads + 1) + h]] = float((q[h] @ k[h].T).norm())
    return out


def ov_norm(x: LookInputs) -> dict[str, float]:
    """Heads only: ‖W_V W_O‖_F, what the head moves into the residual stream per unit attended (gauge-invariant)."""
    out = {}
    for l in range(x.n_layers):
        v, o = _head(x, "W_V", l), _head(x, "W_O", l)
        for h in range(x.n_heads):
            out[x.nodes[l * (x.n_heads + 1) + h]] = float((v[h] @ o[h]).norm())
    return out


def _writers(x: LookInputs) -> list[tuple[str, int, bool, torch.Tensor]]:
    """(node, layer, is_mlp, write matrix [rows, d_model]) for every node: W_O[h] or W_out."""
    out = []
    for l in range(x.n_layers):
        o = _head(x, "W_O", l)
        out += [(x.nodes[l * (x.n_heads + 1) + h], l, False, o[h]) for h in range(x.n_heads)]
        out.append((x.nodes[l * (x.n_heads + 1) + x.n_heads], l, True, x.state_dict[f"blocks.{l}.mlp.W_out"].double()))
    return out


def _readers(x: LookInputs, layer: int, is_mlp: bool) -> list[torch.Tensor]:
    """Read matrices [d_model, cols] of every component that comes after a writer in `layer`: the
    same layer's MLP (for a head), and every q, k, v and MLP input of later layers."""
    out = [] if is_mlp else [x.state_dict[f"blocks.{layer}.mlp.W_in"].double()]
    for l in range(layer + 1, x.n_layers):
        for name in ("W_Q", "W_K", "W_V"):
            out += list(_head(x, name, l))
        out.append(x.state_dict[f"blocks.{l}.mlp.W_in"].double())
    return out


def _composition(write: torch.Tensor, read: torch.Tensor) -> float:
    """‖W_write W_read‖_F / (‖W_write‖_F ‖W_read‖_F): how much of what is written lands where it is
    read, independent of either matrix's scale (Elhage et al. 2021's composition score)."""
    denom = float(write.norm() * read.norm())
    return float((write @ read).norm()) / denom if denom > 1e-12 else 0.0


def reader_alignment(x: LookInputs) -> dict[str, float]:
    """Largest composition of the node's write matrix with any later component's read matrix (q, k, v,
    MLP input); the last MLP, which nothing reads but the unembedding, is left out."""
    out = {}
    for node, layer, is_mlp, write in _writers(x):
        readers = _readers(x, layer, is_mlp)
        if readers:
            out[node] = max(_composition(write, r) for r in readers)
    return out


def _unembed(x: LookInputs) -> torch.Tensor:
    w_u = x.state_dict["unembed.W_U"].double()
    if x.task_kind == "classification":  # only logit differences reach the answer
        return w_u - w_u.mean(-1, keepdim=True)
    return w_u[:, :1]


def unembed_alignment(x: LookInputs) -> dict[str, float]:
    """Composition of the node's write matrix with the (centred) unembedding."""
    w_u = _unembed(x)
    return {node: _composition(write, w_u) for node, _, _, write in _writers(x)}
