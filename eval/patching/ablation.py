"""Nodes or edges to ablate -> the model's logits and behaviour under that ablation.

A node is ablated by replacing its output with a reference value: `resample` the counterfactual
run's activation (default), `mean` the clean batch mean per position, `zero` zeros. An edge
src->dst is ablated by giving dst's input the reference value of src instead of its current value
(the residual stream is a sum, so the difference is added at dst's input); this is MIB's
counterfactual edge ablation. Where nodes live in the model is eval.patching.hooks' business.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Literal

import torch

from eval.core.circuit import INPUT, parse_node
from eval.core.graph import ComputationGraph
from eval.patching.after_attention import block_state, logits_after_attention
from eval.patching.bare import BareModel, bare_model
from eval.patching.hooks import Adapter, Start, adapt
from eval.patching.task import TaskData

AblationKind = Literal["resample", "mean", "zero"]
MetricKind = Literal["logit_diff", "accuracy"]
REGRESSION_TOLERANCE = 0.05
"""A regression output counts as correct within this distance (InterpBench's convention)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationContext:
    """A model, its task data and the reference value every writer is ablated to."""

    model: Any
    """transformer_lens HookedTransformer (3.x) or TransformerBridge (4.x) under evaluation."""
    adapter: Adapter
    """Where the model's nodes live and how they are patched (eval.patching.hooks)."""
    task: TaskData
    """Clean / counterfactual inputs and labels."""
    graph: ComputationGraph
    """The model's computation graph (head granularity)."""
    kind: AblationKind
    """How an ablated node's value is chosen."""
    reference: dict[str, torch.Tensor]
    """Writer (`input`, heads, MLPs) -> the value it takes when ablated [batch or 1, pos, d_model]."""

    def forward(self) -> torch.Tensor:
        """Clean logits, nothing ablated."""
        return self.adapter.forward(self.task.tokens, self.task.mask)

    @functools.cached_property
    def starts(self) -> tuple[Start, ...]:
        """The clean pass's state at every block (index = layer), computed once: a pass that patches
        nothing before block l starts there (eval.patching.hooks.Start)."""
        return self.adapter.starts(self.task.tokens, self.task.mask)

    @functools.cached_property
    def bare(self) -> BareModel | None:
        """The model's blocks written out (eval.patching.bare), or None where they are not: the
        exact edge methods' passes run there instead of through hooks when they can."""
        return bare_model(self.model)


def make_context(model: Any, task: TaskData, graph: ComputationGraph, kind: AblationKind = "resample") -> AblationContext:
    """Cache the reference activations of every writer for ablation `kind`."""
    if kind not in ("resample", "mean", "zero"):
        raise ValueError(f"unknown ablation {kind!r}; allowed: resample, mean, zero")
    adapter = adapt(model)
    tokens, mask = (task.cf_tokens, task.cf_mask) if kind == "resample" else (task.tokens, task.mask)
    reference = reference_values(adapter, tokens, mask, (INPUT, *graph.components), kind)
    return AblationContext(model=model, adapter=adapter, task=task, graph=graph, kind=kind, reference=reference)


def reference_values(adapter: Adapter, tokens: torch.Tensor, attention_mask: torch.Tensor | None,
                     nodes: Collection[str], kind: str) -> dict[str, torch.Tensor]:
    """The values ablated writers take: `resample` their outputs on these (counterfactual) inputs,
    `mean` those outputs averaged over the batch per position, `zero` zeros."""
    outs = adapter.outputs(tokens, attention_mask, nodes)
    if kind == "mean":
        return {n: v.mean(dim=0, keepdim=True).expand_as(v) for n, v in outs.items()}
    if kind == "zero":
        return {n: torch.zeros_like(v) for n, v in outs.items()}
    if kind != "resample":
        raise ValueError(f"unknown ablation {kind!r}; allowed: resample, mean, zero")
    return outs


def run_nodes_ablated(ctx: AblationContext, ablated: Collection[str]) -> torch.Tensor:
    """Logits with the outputs of `ablated` nodes (head-level names) replaced by their reference."""
    return ctx.adapter.run(ctx.task.tokens, ctx.task.mask, reference=ctx.reference,
                           nodes={node: 1.0 for node in ablated}).logits


def node_metrics(ctx: AblationContext, ablated_sets: Sequence[Collection[str]],
                 metric: Callable[[torch.Tensor], torch.Tensor], *, base: Collection[str] = (),
                 max_rows: int = 1024) -> list[float]:
    """metric(logits [n, pos, d_vocab_out]) with each set of components ablated on top of `base`
    (ablated in every one), one float per set.

    The sets are stacked as row blocks of n rows, max_rows // n per forward pass (per-row node
    weights, eval.patching.hooks), sorted by their first layer: nothing before a set's earliest node differs
    from the base pass, so each pass starts at its earliest node's block from the base pass's state
    (one extra pass when `base` is not empty), and where the model's MLPs are written out (`ctx.bare`)
    after that block's attention, which the set cannot change either (eval.patching.after_attention).
    Activation patching, the ablation scan and greedy search cost a fraction of one full forward pass
    per set this way.
    """
    task, adapter = ctx.task, ctx.adapter
    n, L = task.n, adapter.n_layers
    base = list(base)
    layer = lambda node: parse_node(node).layer  # noqa: E731 (components only: heads and MLPs)
    firsts = [min((layer(c) for c in s), default=L - 1) for s in ablated_sets]
    order = sorted(range(len(ablated_sets)), key=lambda i: firsts[i])
    per = max(1, max_rows // n)
    out = [0.0] * len(ablated_sets)
    bm = ctx.bare
    if bm is not None and adapter.mlp_in is not None:  # each pass begins after its first block's attention (eval.patching.after_attention)
        state = block_state(adapter, task.tokens, task.mask, ctx.reference, base)
        for i0 in range(0, len(order), per):
            chunk = order[i0:i0 + per]
            sets = [set(ablated_sets[i]) for i in chunk]
            with torch.no_grad():
                logits = logits_after_attention(adapter, bm, state, min(firsts[i] for i in chunk), sets, set(base),
                                                ctx.reference, task.tokens, task.mask)
            for j, i in enumerate(chunk):
                out[i] = float(metric(logits[j * n:(j + 1) * n]))
        return out
    starts = ctx.starts if not base else adapter.starts(task.tokens, task.mask, reference=ctx.reference,
                                                        nodes={b: 1.0 for b in base})
    for i0 in range(0, len(order), per):
        chunk = order[i0:i0 + per]
        k, first = len(chunk), min(firsts[i] for i in chunk)
        names = {c for i in chunk for c in ablated_sets[i]} | {b for b in base if layer(b) >= first}
        # per-row weight [k·n]: 1 on the blocks whose set (or the base) ablates c
        weights = {c: torch.tensor([float(c in ablated_sets[i] or c in base) for i in chunk], device=task.tokens.device)
                   .repeat_interleave(n) for c in sorted(names)}
        with torch.no_grad():
            logits = adapter.run(task.tokens.repeat(k, 1), task.mask.repeat(k, 1),
                                 reference={c: ctx.reference[c].repeat(k, 1, 1) for c in names},
                                 nodes=weights, start=starts[first]).logits
        for j, i in enumerate(chunk):
            out[i] = float(metric(logits[j * n:(j + 1) * n]))
    return out


def run_edges_kept(ctx: AblationContext, kept: Iterable[tuple[str, str]]) -> torch.Tensor:
    """Logits with every q/k/v-level edge not in `kept` ablated (MIB edge ablation)."""
    kept = set(kept)
    removed = {edge: 1.0 for edge in ctx.graph.at("qkv").edges if edge not in kept}
    return ctx.adapter.run(ctx.task.tokens, ctx.task.mask, reference=ctx.reference, edges=removed).logits


def behaviour(task: TaskData, logits: torch.Tensor, metric: MetricKind = "logit_diff") -> float:
    """The task metric m on logits [batch, n_ctx, d_vocab_out], averaged over label positions.

    logit_diff: classification, logit of the clean label minus logit of the counterfactual label
    at positions where the two differ (MIB's logit difference); regression, the output's signed
    distance from the counterfactual label towards the clean one at those positions (minus MSE
    would have zero gradient at the clean point, blinding gradient attribution). accuracy: share of label positions the output gets right
    (regression within REGRESSION_TOLERANCE).
    """
    return float(behaviour_tensor(task, logits, metric))


def behaviour_tensor(task: TaskData, logits: torch.Tensor, metric: MetricKind = "logit_diff") -> torch.Tensor:
    """`behaviour` as a differentiable scalar tensor (gradient attribution needs it)."""
    pos = task.positions
    if metric == "accuracy":
        if task.task_kind == "regression":
            return ((logits[..., 0] - task.labels).abs() <= REGRESSION_TOLERANCE)[pos].float().mean()
        return (logits.argmax(-1) == task.labels)[pos].float().mean()
    differ = pos & (task.labels != task.cf_labels)
    if not differ.any():
        raise ValueError("the counterfactuals never change the reference label: logit difference undefined")
    if task.task_kind == "regression":  # linear in the output, so its gradient is not 0 at the clean point
        pred = logits[..., 0]
        return ((pred - task.cf_labels) * torch.sign(task.labels - task.cf_labels))[differ].mean()
    clean = logits.gather(-1, task.labels.unsqueeze(-1)).squeeze(-1)
    cf = logits.gather(-1, task.cf_labels.unsqueeze(-1)).squeeze(-1)
    return (clean - cf)[differ].mean()

