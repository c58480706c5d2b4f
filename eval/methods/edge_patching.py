"""Model + task -> q/k/v edge scores by patching: exact edge patching, EAP, EAP-IG (inputs, activations).

An edge u->v is patched as MIB patches it: only v's input sees u's reference (counterfactual)
output instead of its current one (eval.patching.hooks, `Adapter.run(edges=...)`). Every score has the sign
of MIB's Eq. 3, (a_u - a'_u)·∂m/∂a_v, i.e. it estimates m(clean) - m(edge patched): positive when
the edge helps the clean behaviour. m is the task behaviour of eval.patching.ablation (logit difference, or
the signed regression distance), a mean over label positions.

- `edge_patching`: the exact m(clean) - m(u->v patched) of every edge. Edges are batched as row
  blocks: one forward pass holds `max_rows // n` edges, each block of n rows patching its own edge
  through per-row weights, so the Python loop runs over forward passes, not over edges. Patching
  an edge into a reader of block l leaves every block before l as in the clean run, so edges are
  ordered by their reader's block and each pass starts there from the cached clean state
  (eval.patching.hooks.Start): an edge costs the blocks from its reader on, about a third of a full pass
  averaged over a model's edges (later readers have more edges).
- `eap`: MIB Eq. 3 (Nanda 2023; Syed et al. 2024), from one counterfactual forward, one clean
  forward with gradients and one backward pass, whatever the edge count.
- `eap_ig_inputs` (Hanna et al. 2024): the gradient at v's input averaged over Z runs whose input
  embedding is a' + (k/Z)(a - a'), k = 1..Z, every activation recomputed from it.
- `eap_ig_activations` (Marks et al. 2025; MIB Eq. 4): the gradient at v's input averaged over Z
  runs in which u's own group (the input; one layer's heads together; one MLP) is set to
  a'_u + (k/Z)(a_u - a'_u), k = 1..Z. MIB's reference code averages each receiver's gradient over
  the runs of every group instead; Eq. 4 interpolates the sender, which is what is done here.
  (2L + 1)·Z runs: O(Z·L), as MIB states.
Both IG variants take Z = 5 by default (MIB §3.2, following Hanna et al.) and use the right
Riemann sum (k = 1..Z, as Hanna et al. write it), so one step is EAP exactly. (MIB's reference
code, hannamw/EAP-IG, takes k = 0..Z-1 for the inputs variant: the counterfactual end, not the
clean one, and k = 1..Z for the activations variant.)

Cost: the gradient methods run one counterfactual forward pass (the reference) and then stack
their runs as row blocks, `max_rows` rows (and GRAD_FLOATS of reader inputs and gradients) per
forward and backward pass: EAP is 2 forwards + 1 backward; IG-inputs 1 + ceil(Z·n / rows) of each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from eval.patching.ablation import AblationContext, AblationKind, behaviour_tensor, make_context
from eval.core.circuit import INPUT, head_node, mlp_node, node_sort_key, parse_node
from eval.core.device import device_of
from eval.core.graph import ComputationGraph
from eval.methods.interface import Method, MethodOutput, Progress
from eval.patching import bare
from eval.patching.task import TaskData

GRAD_FLOATS = 64 * 2**20
"""Float budget (256 MiB) for the reader inputs and gradients one attribution pass holds."""
Edge = tuple[str, str]
Metric = Callable[[torch.Tensor], torch.Tensor]
"""Logits of one block [n, pos, d_vocab_out] -> a scalar tensor."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchingOptions:
    """How exact edge patching is batched."""

    max_rows: int = 1024
    """Rows per forward pass (n task rows per patched edge); bounds memory, fewer passes when larger."""

    def __post_init__(self) -> None:
        if self.max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {self.max_rows}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class IGOptions:
    """Integrated-gradient settings shared by both EAP-IG variants."""

    steps: int = 5
    """Z, interpolation points per sender (MIB §3.2 uses 5, following Hanna et al. 2024)."""
    max_rows: int = 1024
    """Rows per forward/backward pass; the Z (and group) runs are stacked as row blocks up to it."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {self.max_rows}")


# ---- shared by the edge-level methods ----

def readers(graph: ComputationGraph) -> tuple[str, ...]:
    """Every reader at q/k/v granularity, forward order: a{l}.h{h}<q|k|v>, m{l}, logits."""
    return tuple(dict.fromkeys(dst for _, dst in graph.at("qkv").edges))


def writers(graph: ComputationGraph) -> tuple[str, ...]:
    """Every writer, forward order: input, heads and MLPs."""
    return (INPUT, *graph.components)


def repeat_rows(x: torch.Tensor, k: int) -> torch.Tensor:
    """[n, ...] -> [k·n, ...]: k copies of a batch, one block after another."""
    return x.repeat(k, *([1] * (x.dim() - 1))) if k > 1 else x


def block_weight(k: int, n: int, values: Iterable[float], device: torch.device) -> torch.Tensor:
    """A per-row weight [k·n] that is values[i] on the rows of block i."""
    return torch.tensor(list(values), dtype=torch.float32, device=device).repeat_interleave(n)


def behaviour_metric(task: TaskData) -> Metric:
    """m: the task behaviour on one block (eval.patching.ablation.behaviour_tensor)."""
    return lambda logits: behaviour_tensor(task, logits)


def patched_metrics(ctx: AblationContext, patch_sets: Sequence[Mapping[Edge, float]], metric: Metric, *,
                    max_rows: int, progress: Progress | None = None) -> torch.Tensor:
    """metric of the model with each set of q/k/v edges patched to the reference: [len(patch_sets)].

    The sets are stacked as row blocks of n rows (max_rows // n per forward pass), each block
    patching its own edges through per-row weights (eval.patching.hooks). Nothing before the earliest
    patched reader of a pass differs from the clean run, so the pass starts at that reader's block
    from the clean state (ctx.starts): order the sets by their earliest reader's layer
    (`reader_layer`) and most passes skip most blocks. progress counts the sets done.
    """
    task = ctx.task
    n = task.n
    per = max(1, max_rows // n)
    L = ctx.adapter.n_layers
    # Written out (eval.patching.bare) where the model allows it and every reader is q/k/v-level.
    bare_model = ctx.bare if all(parse_node(d).kind != "head" or parse_node(d).qkv is not None
                                 for patch in patch_sets for _, d in patch) else None
    allowed = None if bare_model is None else bare.key_mask(bare_model, task.mask, n, int(task.tokens.shape[1]),
                                                             device_of(task.tokens))
    out: list[torch.Tensor] = []
    for first in range(0, len(patch_sets), per):
        chunk = patch_sets[first:first + per]
        k = len(chunk)
        # Logits' edges start at the last block: a pass runs at least one block (eval.patching.hooks.Start).
        layer = min((reader_layer(d, L) for patch in chunk for _, d in patch), default=L - 1)
        start = ctx.starts[min(layer, L - 1)]
        with torch.no_grad():
            if bare_model is not None:
                logits = bare.run(bare_model, bare.edge_patches(bare_model, start, ctx.reference, chunk), k, allowed)
            else:
                logits = _hooked_pass(ctx, chunk, start)
        logits = logits.view(k, n, *logits.shape[1:])
        out += [metric(logits[i]).detach() for i in range(k)]
        if progress is not None:
            progress(len(out), len(patch_sets))
    return torch.stack(out) if out else torch.zeros(0, device=device_of(task.tokens))


def _hooked_pass(ctx: AblationContext, chunk: Sequence[Mapping[Edge, float]], start: Any) -> torch.Tensor:
    """Logits of one pass of patched_metrics through eval.patching.hooks, block i patching chunk[i]."""
    task, k = ctx.task, len(chunk)
    index: dict[Edge, int] = {}
    values: list[list[float]] = []  # per edge, its weight in each block
    for i, patch in enumerate(chunk):
        for edge, w in patch.items():
            j = index.setdefault(edge, len(index))
            if j == len(values):
                values.append([0.0] * k)
            values[j][i] = float(w)
    keys = tuple(index)
    dev = device_of(task.tokens)
    W = torch.tensor(values, device=dev).T if values else torch.zeros(k, 0, device=dev)  # [k blocks of n rows, edges]
    reference = {s: repeat_rows(ctx.reference[s], k) for s in {s for s, _ in keys}}
    return ctx.adapter.run(repeat_rows(task.tokens, k), repeat_rows(task.mask, k), reference=reference,
                           edge_matrix=(keys, W), start=start).logits


def reader_layer(reader: str, n_layers: int) -> int:
    """The block a q/k/v-level reader reads in: its layer; logits n_layers (after the last)."""
    node = parse_node(reader)
    return n_layers if node.kind == "logits" else node.layer


def _edge_matrix(graph: ComputationGraph, sources: Sequence[str], dsts: Sequence[str],
                 scores: torch.Tensor) -> dict[Edge, float]:
    """[len(sources), len(dsts)] scores -> {edge: score} over the graph's q/k/v edges."""
    row = {s: i for i, s in enumerate(sources)}
    col = {d: j for j, d in enumerate(dsts)}
    return {(s, d): float(scores[row[s], col[d]]) for s, d in graph.at("qkv").edges if s in row and d in col}


# ---- exact edge patching ----

def edge_effects(ctx: AblationContext, edges: Sequence[Edge], *, max_rows: int = 1024,
                 metric: Metric | None = None, progress: Progress | None = None) -> dict[Edge, float]:
    """Exact m(clean) - m(edge patched) for each q/k/v edge, batched over edges."""
    m = metric or behaviour_metric(ctx.task)
    with torch.no_grad():
        clean = float(m(ctx.forward()))
    ordered = _by_reader_layer(ctx, edges)
    patched = patched_metrics(ctx, [{e: 1.0} for e in ordered], m, max_rows=max_rows, progress=progress)
    effects = {e: clean - float(v) for e, v in zip(ordered, patched)}
    return {e: effects[e] for e in edges}


def _by_reader_layer(ctx: AblationContext, edges: Sequence[Edge]) -> list[Edge]:
    """Edges in the order patched_metrics runs them fastest: by the receiver's layer (a pass starts
    at its earliest receiver's block), then by sender (a pass then patches one or two senders, so
    its per-row patch is [rows, readers, 1-2] wide instead of [rows, readers, every sender])."""
    L = ctx.adapter.n_layers
    return sorted(edges, key=lambda e: (reader_layer(e[1], L), node_sort_key(e[0])))


def edge_patching(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: AblationKind = "resample",
                  options: PatchingOptions = PatchingOptions(), progress: Progress | None = None) -> MethodOutput:
    """Exact activation patching of every q/k/v edge: m(clean) - m(only that edge patched)."""
    ctx = make_context(model, task, graph, ablation)
    return MethodOutput(edge_scores=edge_effects(ctx, graph.at("qkv").edges, max_rows=options.max_rows,
                                                 progress=progress))


def logit_movement(ctx: AblationContext, edges: Sequence[Edge], *, max_rows: int = 1024) -> dict[Edge, float]:
    """Largest |logit change| at label positions when each edge alone is patched (0: inert)."""
    with torch.no_grad():
        moved = movement_metric(ctx.task, ctx.forward())
    return {e: float(v) for e, v in per_edge(ctx, edges, moved, max_rows=max_rows).items()}


def movement_metric(task: TaskData, clean: torch.Tensor) -> Metric:
    """m: the largest |logit change| at label positions of one block against `clean` (the
    unpatched logits, ctx.forward())."""
    clean = clean[task.positions]
    return lambda logits: (logits[task.positions] - clean).abs().max()


def per_edge(ctx: AblationContext, edges: Sequence[Edge], metric: Metric, *, max_rows: int) -> dict[Edge, torch.Tensor]:
    """metric of the model with each q/k/v edge alone patched, in the order patched_metrics runs
    them fastest (by the receiver's layer): {edge: metric value}. One pass over the edges serves
    several numbers when `metric` stacks them (zoo.edge_exactness)."""
    ordered = _by_reader_layer(ctx, edges)
    values = patched_metrics(ctx, [{e: 1.0} for e in ordered], metric, max_rows=max_rows)
    return dict(zip(ordered, values))


def inert_edges(ctx: AblationContext, edges: Iterable[Edge], *, atol: float = 1e-6,
                max_rows: int = 1024) -> list[Edge]:
    """The edges (head level: all their q/k/v parts) that no counterfactual of the task moves: patching
    them leaves every logit at every label position within atol. Such a ground-truth edge cannot be
    found by any counterfactual method on this task; report it, do not score it as a miss."""
    parts = {e: ctx.graph.expand_to_qkv(e) for e in dict.fromkeys(tuple(e) for e in edges)}
    moved = logit_movement(ctx, sorted({p for ps in parts.values() for p in ps}), max_rows=max_rows)  # one batch
    return [e for e, ps in parts.items() if max(moved[p] for p in ps) <= atol]


# ---- attribution patching ----

def _attribution(model: Any, task: TaskData, graph: ComputationGraph, ablation: AblationKind,
                 groups: Sequence[Sequence[str]], patched: Callable[[Sequence[str]], Sequence[str]],
                 steps: int, max_rows: int) -> MethodOutput:
    """Edge scores (a_u - a'_u)·mean_k ∂m/∂a_v over k = 1..steps, where run (group, k) moves the
    writers `patched(group)` to α = k/steps of the way from their reference to their clean value,
    and its gradients count for the group's senders u.

    Runs are stacked as row blocks (max_rows per forward/backward pass). The first block is
    (group 0, k = steps), which patches nothing, so a_u is read there: a counterfactual forward
    (the reference) plus these passes is all it costs.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    ctx = make_context(model, task, graph, ablation)
    sources, dsts = writers(graph), readers(graph)
    row = {s: i for i, s in enumerate(sources)}
    blocks: list[tuple[Sequence[str], dict[str, float]]] = [
        (group, {u: 1.0 - k / steps for u in patched(group)}) for group in groups for k in range(steps, 0, -1)]
    scores = torch.zeros(len(sources), len(dsts), device=device_of(task.tokens))
    diff: dict[str, torch.Tensor] = {}
    n = task.n
    # Every reader's input and its gradient are held per row: cap the rows by GRAD_FLOATS as well.
    per_row = int(task.tokens.shape[1]) * int(ctx.adapter.attn["W_O"].shape[-1]) * 2 * len(dsts)
    per = max(1, min(max_rows, GRAD_FLOATS // per_row) // n)
    metric = behaviour_metric(task)
    for start in range(0, len(blocks), per):
        chunk = blocks[start:start + per]
        k = len(chunk)
        names = sorted({u for _, b in chunk for u in b})
        nodes = {u: block_weight(k, n, (b.get(u, 0.0) for _, b in chunk), device_of(task.tokens)) for u in names}
        reference = {u: repeat_rows(ctx.reference[u], k) for u in names}
        run = ctx.adapter.run(repeat_rows(task.tokens, k), repeat_rows(task.mask, k), reference=reference,
                              nodes=nodes, read_inputs=dsts, read_outputs=() if diff else sources, grad=True)
        if not diff:  # block 0 is the clean run
            diff = {u: (run.outputs[u][:n] - ctx.reference[u]).detach() for u in sources}
        logits = run.logits.view(k, n, *run.logits.shape[1:])
        total = sum(metric(logits[i]) for i in range(k))  # each block's gradient is its own m's
        grads = torch.autograd.grad(total, [run.inputs[d] for d in dsts], allow_unused=True)
        # G: [readers, k, n·pos·d_model]
        G = torch.stack([torch.zeros_like(run.inputs[d]) if g is None else g for d, g in zip(dsts, grads)])
        G = G.detach().reshape(len(dsts), k, -1)
        for i, (group, _) in enumerate(chunk):
            D = torch.stack([diff[u].reshape(-1) for u in group])  # [senders, n·pos·d_model]
            scores[[row[u] for u in group]] += D @ G[:, i].T
        del run, grads, G
    return MethodOutput(edge_scores=_edge_matrix(graph, sources, dsts, scores / steps))


def eap(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: AblationKind = "resample") -> MethodOutput:
    """Edge attribution patching (MIB Eq. 3): (a_u - a'_u)·∂m/∂a_v at the clean input."""
    return _attribution(model, task, graph, ablation, [writers(graph)], lambda g: (), steps=1,
                        max_rows=task.n)


def eap_ig_inputs(model: Any, task: TaskData, *, graph: ComputationGraph, ablation: AblationKind = "resample",
                  options: IGOptions = IGOptions()) -> MethodOutput:
    """EAP-IG-inputs (Hanna et al. 2024): gradients averaged over interpolated input embeddings."""
    return _attribution(model, task, graph, ablation, [writers(graph)], lambda g: (INPUT,), steps=options.steps,
                        max_rows=options.max_rows)


def ig_groups(graph: ComputationGraph) -> list[tuple[str, ...]]:
    """The writers EAP-IG-activations interpolates together: input, each layer's heads, each MLP."""
    out: list[tuple[str, ...]] = [(INPUT,)]
    for layer in range(graph.n_layers):
        out.append(tuple(head_node(layer, h) for h in range(graph.n_heads)))
        out.append((mlp_node(layer),))
    return out


def eap_ig_activations(model: Any, task: TaskData, *, graph: ComputationGraph,
                       ablation: AblationKind = "resample", options: IGOptions = IGOptions()) -> MethodOutput:
    """EAP-IG-activations (Marks et al. 2025, MIB Eq. 4): each sender's group interpolated in turn."""
    return _attribution(model, task, graph, ablation, ig_groups(graph), lambda g: g, steps=options.steps,
                        max_rows=options.max_rows)


METHODS = (
    Method(key="edge_patching", name="Edge patching", function=edge_patching, seeded=True,
           description="exact m(clean) - m(one q/k/v edge patched), batched over edges"),
    Method(key="eap", name="EAP", function=eap,
           description="edge attribution patching: (a_u - a'_u) x dm/d(input of v) (MIB Eq. 3)"),
    Method(key="eap_ig_inputs", name="EAP-IG-inputs", function=eap_ig_inputs,
           description="EAP with integrated gradients over input embeddings, 5 steps (Hanna et al. 2024)"),
    Method(key="eap_ig_activations", name="EAP-IG-activations", function=eap_ig_activations,
           description="EAP with integrated gradients over each sender's layer, 5 steps (MIB Eq. 4)"),
)
