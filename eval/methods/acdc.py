"""Model + task -> one ACDC circuit per threshold τ (Conmy et al. 2023).

ACDC starts from the full q/k/v edge graph and visits the readers in reverse topological order
(logits, then each layer's MLP and heads' q/k/v inputs from the last layer down). For each
incoming edge u->v it patches the edge (to the reference, as eval.patching.hooks patches edges) on top of
every edge already removed, and removes it for good when the metric grows by at most τ:

    remove u->v  iff  metric(circuit without u->v) - metric(circuit) <= τ

so τ = 0 removes only edges whose removal changes nothing (or helps) and τ = ∞ removes every
edge. The metric is, as in InterpBench App. D, the divergence of the circuit's output from the full
model's at label positions (KL for classification, mean squared difference for regression), or the
negated task behaviour. A reader that no kept edge leaves (a node cut off from the logits) has all
its incoming edges removed without a forward pass, as ACDC skips such nodes.

The whole τ grid runs at once (eval.methods.acdc_sweep): one forward pass per edge decides it for every τ,
stacking one row block per distinct circuit (τ whose removed sets are equal share a block). Every
edge already removed goes into a reader at or after the current one, so each pass starts at the
current reader's block from the clean state (eval.patching.hooks.Start), and the removed edges from writers
before that block enter as fixed offsets summed once, not in every pass.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

import torch

from eval.patching.ablation import AblationKind, make_context
from eval.core.circuit import promote
from eval.methods.acdc_sweep import Sweep
from eval.methods.edge_patching import Edge, Metric, readers
from eval.core.graph import ComputationGraph
from eval.methods.interface import CircuitRun, Method, MethodOutput, Progress
from eval.patching.task import TaskData

AcdcMetric = Literal["divergence", "logit_diff"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class AcdcOptions:
    """The metric, the τ grid and the batching of an ACDC sweep."""

    taus: tuple[float, ...] = (1e-2, 0.0, 1e-4, 1e-3, 3e-3, 3e-2, 0.1, 0.3, 1.0)
    """Thresholds; one circuit each, the first is the method's chosen circuit."""
    metric: AcdcMetric = "divergence"
    """"divergence": KL (classification) or mean squared difference (regression) from the full
    model's output at label positions (InterpBench App. D); "logit_diff": minus the task behaviour."""
    max_rows: int = 2048
    """Rows per forward pass (n task rows per τ block)."""

    def __post_init__(self) -> None:
        if not self.taus:
            raise ValueError("ACDC needs at least one threshold τ")
        if any(not tau >= 0 for tau in self.taus):
            raise ValueError(f"ACDC thresholds must be >= 0, got {self.taus}")
        if self.metric not in typing.get_args(AcdcMetric):
            raise ValueError(f"unknown ACDC metric {self.metric!r}; allowed: {', '.join(typing.get_args(AcdcMetric))}")
        if self.max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {self.max_rows}")


def divergence_metric(task: TaskData, full_logits: torch.Tensor) -> Metric:
    """Divergence of a block's output from the full model's, at label positions (≥ 0, 0 at the full
    model): one block [n, pos, d_vocab_out] -> a scalar, or blocks [k, n, pos, d_vocab_out] -> [k]
    (ACDC's sweep scores every row block of a pass at once)."""
    rows, cols = task.positions.nonzero(as_tuple=True)  # the order a boolean mask picks them in
    if task.task_kind == "regression":
        target = full_logits[rows, cols, 0]
        return lambda logits: ((logits[..., rows, cols, 0] - target) ** 2).mean(-1)
    log_p = torch.log_softmax(full_logits[rows, cols].double(), dim=-1)

    def kl(logits: torch.Tensor) -> torch.Tensor:
        log_q = torch.log_softmax(logits[..., rows, cols, :].double(), dim=-1)
        return (log_p.exp() * (log_p - log_q)).sum(-1).mean(-1)

    return kl


def logit_diff_metric(task: TaskData) -> Metric:
    """Minus the task behaviour (eval.patching.ablation.behaviour_tensor's logit difference) of one
    block -> a scalar, or of blocks [k, n, pos, d_vocab_out] -> [k]."""
    differ = task.positions & (task.labels != task.cf_labels)
    if not differ.any():
        raise ValueError("the counterfactuals never change the reference label: logit difference undefined")
    rows, cols = differ.nonzero(as_tuple=True)
    label, cf = task.labels[rows, cols], task.cf_labels[rows, cols]
    if task.task_kind == "regression":
        sign = torch.sign(label - cf)
        return lambda logits: -((logits[..., rows, cols, 0] - cf) * sign).mean(-1)
    at = torch.arange(len(rows), device=rows.device)

    def minus_diff(logits: torch.Tensor) -> torch.Tensor:
        picked = logits[..., rows, cols, :]
        return -(picked[..., at, label] - picked[..., at, cf]).mean(-1)

    return minus_diff


def acdc_metric(kind: AcdcMetric, task: TaskData, full_logits: torch.Tensor) -> Metric:
    """The metric ACDC keeps small: a divergence from the full model, or minus the behaviour; of
    one block, or of k blocks at once -> [k]."""
    if kind == "divergence":
        return divergence_metric(task, full_logits)
    if kind == "logit_diff":
        return logit_diff_metric(task)
    raise ValueError(f"unknown ACDC metric {kind!r}; allowed: divergence, logit_diff")


def acdc_sweep(ctx: Any, taus: tuple[float, ...], metric: Metric, *, max_rows: int,
               progress: Progress | None = None) -> list[set[Edge]]:
    """The removed q/k/v edges for each τ (ACDC's reverse topological sweep, all τ at once);
    progress counts the edges decided."""
    qkv = ctx.graph.at("qkv")
    incoming: dict[str, list[str]] = {}
    for src, dst in qkv.edges:
        incoming.setdefault(dst, []).append(src)
    sweep = Sweep(ctx, qkv.edges, taus, metric, max_rows=max_rows)
    done, total = 0, len(qkv.edges)
    for reader in reversed(readers(qkv)):
        for src in reversed(incoming[reader]):
            sweep.decide((src, reader))
            done += 1
            if progress is not None:
                progress(done, total)
    return sweep.removed


def acdc(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: AblationKind = "resample",
         options: AcdcOptions = AcdcOptions(), progress: Progress | None = None) -> MethodOutput:
    """ACDC on the q/k/v edge graph: one circuit per τ in options.taus (the first is the chosen one)."""
    ctx = make_context(model, task, graph, ablation)
    with torch.no_grad():
        full = ctx.forward()
    metric = acdc_metric(options.metric, task, full)
    removed = acdc_sweep(ctx, tuple(options.taus), metric, max_rows=options.max_rows, progress=progress)
    edges = graph.at("qkv").edges
    circuits = []
    for tau, gone in zip(options.taus, removed):
        kept = [e for e in edges if e not in gone]
        nodes = sorted({promote(n) for e in kept for n in e} & set(graph.components))
        circuits.append(CircuitRun(param=float(tau), nodes=frozenset(nodes), edges=frozenset(kept)))
    return MethodOutput(circuits=tuple(circuits))


METHODS = (
    Method(key="acdc", name="ACDC", function=acdc, seeded=True,
           description="remove q/k/v edges in reverse topological order while the divergence grows <= tau"),
)
