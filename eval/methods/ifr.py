"""Model + task -> q/k/v edge scores by information flow routes (Ferrando & Voita 2024, as MIB adapts it).

No counterfactual and no gradient: one clean forward pass. For a reader v with input a_v and a
sender u with output a_u, MIB App. D.2 Eq. 5 scores the edge by proximity,

    imp(u, v) = max(‖a_v‖₁ - ‖a_u - a_v‖₁, 0) / Σ_{u' → v} max(‖a_v‖₁ - ‖a_u' - a_v‖₁, 0),

per input and position; the importance is averaged over an input's real (unpadded) positions and
then over inputs, as MIB's reference code does. The q, k and v inputs of a head read the same
residual stream, so they get the same scores. Scores sum to 1 over a reader's senders, so MIB
builds IFR circuits by greedy search rather than top-n; here they are scores like any other.
"""

from __future__ import annotations

from typing import Any

import torch

from eval.methods.edge_patching import readers, writers
from eval.core.graph import ComputationGraph
from eval.patching.hooks import adapt
from eval.methods.interface import Method, MethodOutput
from eval.patching.task import TaskData


def ifr(model: Any, task: TaskData, *, graph: ComputationGraph) -> MethodOutput:
    """Information flow routes: each sender's share of the proximity to a reader's input (MIB Eq. 5)."""
    qkv = graph.at("qkv")
    senders: dict[str, list[str]] = {}
    for src, dst in qkv.edges:
        senders.setdefault(dst, []).append(src)
    dsts = readers(qkv)
    with torch.no_grad():
        run = adapt(model).run(task.tokens, task.mask, read_outputs=writers(graph), read_inputs=dsts)
        real = task.mask.bool().float()  # [n, pos]
        lengths = real.sum(dim=1).clamp(min=1)  # [n]
        scores: dict[tuple[str, str], float] = {}
        for v in dsts:
            a_v = run.inputs[v]  # [n, pos, d_model]
            srcs = senders[v]
            a_u = torch.stack([run.outputs[u] for u in srcs], dim=2)  # [n, pos, senders, d_model]
            proximity = (a_v.abs().sum(-1, keepdim=True) - (a_u - a_v[:, :, None]).abs().sum(-1)).clamp(min=0)
            total = proximity.sum(-1, keepdim=True)
            importance = torch.where(total > 0, proximity / total.clamp(min=1e-30), torch.zeros_like(proximity))
            per_input = (importance * real[..., None]).sum(dim=1) / lengths[:, None]  # [n, senders]
            for u, value in zip(srcs, per_input.mean(dim=0)):
                scores[(u, v)] = float(value)
    return MethodOutput(edge_scores=scores)


METHODS = (
    Method(key="ifr", name="IFR", function=ifr, seeded=True,
           description="information flow routes: L1 proximity of a sender's output to a reader's input (MIB Eq. 5)"),
)
