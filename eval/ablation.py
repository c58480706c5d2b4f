"""Nodes or edges to ablate -> the model's logits and behaviour under that ablation.

A node is ablated by replacing its output (DESIGN.md hook points) with a reference value:
`resample` the counterfactual run's activation (default), `mean` the clean batch mean per
position, `zero` zeros. An edge src->dst is ablated by giving dst's input the reference value of
src instead of its current value (the residual stream is a sum, so subtract the difference at
dst's input hook); this is MIB's counterfactual edge ablation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from typing import Any, Literal

import torch

from eval.circuit import INPUT, parse_node
from eval.graph import ComputationGraph
from eval.task import TaskData

AblationKind = Literal["resample", "mean", "zero"]
MetricKind = Literal["logit_diff", "accuracy"]
REGRESSION_TOLERANCE = 0.05
"""A regression output counts as correct within this distance (InterpBench's convention)."""


def source_hook(node: str) -> str:
    """Hook point where a source node's output lives (DESIGN.md)."""
    parsed = parse_node(node)
    if parsed.kind == "input":
        return "blocks.0.hook_resid_pre"
    if parsed.kind == "head":
        return f"blocks.{parsed.layer}.attn.hook_result"
    if parsed.kind == "mlp":
        return f"blocks.{parsed.layer}.hook_mlp_out"
    raise ValueError(f"{node!r} writes nothing")


def dest_hook(node: str, n_layers: int) -> str:
    """Hook point where a reader's input lives (before any layer norm)."""
    parsed = parse_node(node)
    if parsed.kind == "logits":
        return f"blocks.{n_layers - 1}.hook_resid_post"
    if parsed.kind == "mlp":
        return f"blocks.{parsed.layer}.hook_mlp_in"
    if parsed.kind == "head" and parsed.qkv:
        return f"blocks.{parsed.layer}.hook_{parsed.qkv}_input"
    raise ValueError(f"{node!r} is not a reader at q/k/v granularity")


def _take(act: torch.Tensor, node: str) -> torch.Tensor:
    """The slice of a hook's activation that belongs to `node` (one head of hook_result)."""
    parsed = parse_node(node)
    return act[:, :, parsed.head] if parsed.kind == "head" else act


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationContext:
    """A model, its task data and the reference activation every node is ablated to."""

    model: Any
    """transformer_lens.HookedTransformer under evaluation."""
    task: TaskData
    """Clean / counterfactual inputs and labels."""
    graph: ComputationGraph
    """The model's computation graph (head granularity)."""
    kind: AblationKind
    """How an ablated node's value is chosen."""
    reference: dict[str, torch.Tensor]
    """Source hook name -> the activation ablated nodes take (full hook tensor)."""

    def forward(self, hooks: list[tuple[str, Any]] | None = None) -> torch.Tensor:
        with torch.no_grad():
            return self.model.run_with_hooks(
                self.task.tokens, attention_mask=self.task.mask, fwd_hooks=hooks or []
            )


def make_context(model: Any, task: TaskData, graph: ComputationGraph, kind: AblationKind = "resample") -> AblationContext:
    """Cache the reference activations of every source for ablation `kind`."""
    if kind not in ("resample", "mean", "zero"):
        raise ValueError(f"unknown ablation {kind!r}; allowed: resample, mean, zero")
    names = {source_hook(n) for n in (INPUT, *graph.components)}
    tokens, mask = (task.cf_tokens, task.cf_mask) if kind == "resample" else (task.tokens, task.mask)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=lambda n: n in names)
    reference = {}
    for name in names:
        act = cache[name]
        if kind == "mean":
            act = act.mean(dim=0, keepdim=True).expand_as(act)
        elif kind == "zero":
            act = torch.zeros_like(act)
        reference[name] = act.detach()
    return AblationContext(model=model, task=task, graph=graph, kind=kind, reference=reference)


def run_nodes_ablated(ctx: AblationContext, ablated: Collection[str]) -> torch.Tensor:
    """Logits with the outputs of `ablated` nodes (head-level names) replaced by their reference."""
    by_hook: dict[str, list[str]] = {}
    for node in ablated:
        by_hook.setdefault(source_hook(node), []).append(node)

    def make(hook_name: str, nodes: list[str]):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            act = act.clone()
            ref = ctx.reference[hook_name]
            for node in nodes:
                parsed = parse_node(node)
                if parsed.kind == "head":
                    act[:, :, parsed.head] = ref[:, :, parsed.head]
                else:
                    act[...] = ref
            return act
        return hook

    return ctx.forward([(name, make(name, nodes)) for name, nodes in by_hook.items()])


def run_edges_kept(ctx: AblationContext, kept: Iterable[tuple[str, str]]) -> torch.Tensor:
    """Logits with every q/k/v-level edge not in `kept` ablated (MIB edge ablation)."""
    graph = ctx.graph.at("qkv")
    kept = set(kept)
    removed: dict[str, list[str]] = {}  # dst -> sources whose edge into dst is ablated
    for src, dst in graph.edges:
        if (src, dst) not in kept:
            removed.setdefault(dst, []).append(src)
    current: dict[str, torch.Tensor] = {}  # this forward pass's source activations, by hook name
    hooks: list[tuple[str, Any]] = []
    for name in {source_hook(n) for n in (INPUT, *graph.components)}:
        hooks.append((name, lambda act, hook: current.__setitem__(hook.name, act)))
    by_hook: dict[str, list[tuple[str, list[str]]]] = {}
    for dst, srcs in removed.items():
        by_hook.setdefault(dest_hook(dst, graph.n_layers), []).append((dst, srcs))

    def make(entries: list[tuple[str, list[str]]]):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            act = act.clone()
            for dst, srcs in entries:
                delta = sum(
                    _take(current[source_hook(s)], s) - _take(ctx.reference[source_hook(s)], s) for s in srcs
                )
                parsed = parse_node(dst)
                if parsed.kind == "head":
                    act[:, :, parsed.head] -= delta
                else:
                    act -= delta
            return act
        return hook

    hooks += [(name, make(entries)) for name, entries in by_hook.items()]
    return ctx.forward(hooks)


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

