"""Edge patches into a set of readers -> the change of their inputs, Δ_r = Σ_s W[r, s] (reference_s -
current_s), summed by chunks of senders. Private to eval.patching.hooks (through eval.patching.hook_plan), split off
to keep each module readable; eval.patching.hooks re-exports the layout and offset types a sweep builds.

Why chunks: a pass with 10^4 edges (ACDC, edge subnetwork probing) spends most of its time here,
not in the model. Each chunk's differences are subtracted and stacked once per pass, laid out as
the row blocks' products read them, and a reader adds one product per chunk it reads.

Edges come by name (`make_group`, from Adapter.run's edges and edge_matrix) or as dense weights per
reader group on a GroupLayout that a sweep makes once (`GroupWeights`, ACDC); Offsets are fixed
input changes a sweep has summed itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

import torch

from eval.core.circuit import LOGITS, head_node, mlp_node, parse_node

QKV = ("q", "k", "v")
Weight = float | torch.Tensor
"""How far a patched value moves towards the reference: 1 replaces it, 0 leaves it; a float, or
a [batch] tensor with one weight per row."""


class Differences(Protocol):
    """What Group.delta reads from its pass (eval.patching.hook_plan.Plan)."""

    out: Mapping[str, torch.Tensor]
    """Writer -> its output in this pass [batch, pos, d_model]."""

    def diff(self, chunk: Chunk, G: int) -> torch.Tensor:
        """[G, writers, (batch // G)·pos·d_model]: the chunk's reference - current differences."""


def order(node: str) -> tuple[int, int]:
    """A writer's place in the forward pass: (layer, head), the input (-1, 0), an MLP after its heads."""
    n = parse_node(node)
    if n.kind == "input":
        return (-1, 0)
    return (n.layer, n.head if n.kind == "head" else 1 << 30)


Chunk = tuple[int, int, bool]
"""Writers whose reference - current differences are stacked together once per pass: (lo, hi, True)
every head and MLP of layers lo..hi-1; (l, l + 1, False) the heads of layer l only (an MLP reads
them before its own output exists); the input with those of lo = 0 (a chunk of one writer makes a
product as slow as a larger one), and alone as (-1, 0, True), which only layer 0's heads read."""
BLOCK_LAYERS = 4
"""Layers per block chunk. A reader sums one product per chunk it reads, each reading and writing
the whole [readers, rows·pos·d_model] sum, so few chunks per reader matter as much as the
products; blocks of K layers (besides one chunk per layer for the layers since the last complete
block) give about L/K + K chunks per reader instead of L, for two copies of each difference."""


def chunk_cover(layer: int, mlp: bool) -> list[Chunk]:
    """The chunks that hold every writer a head (mlp=False) or the MLP of this layer reads."""
    K = BLOCK_LAYERS
    full = layer // K * K
    cover = [*((lo, lo + K, True) for lo in range(0, full, K)), *((l, l + 1, True) for l in range(full, layer)),
             *([(layer, layer + 1, False)] if mlp else [])]
    return cover or [(-1, 0, True)]


def logits_cover(n_layers: int) -> list[Chunk]:
    """The chunks that hold every writer the logits read: what the last layer's heads read, and that
    layer; chunks its readers made already, where a block of the last layers would be stacked for
    this one reader alone."""
    last = n_layers - 1
    return [c for c in chunk_cover(last, False) if c[0] >= 0] + [(last, last + 1, True)]


def in_chunk(writer: str, chunk: Chunk) -> bool:
    """Whether the chunk holds this writer."""
    layer, head = order(writer)
    lo, hi, whole = chunk
    if layer < 0:  # the input
        return lo <= 0
    return lo <= layer < hi and (whole or head != 1 << 30)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Group:
    """The edge patches into one set of readers: Δ = Σ_s W[r, s] (reference_s - current_s)."""

    sources: tuple[str, ...]
    """Writers with a patched edge into some reader of the group, forward order."""
    weights: torch.Tensor
    """[G, readers, sources], G = 1 (every row), batch (per row) or a divisor of batch (per row
    block: G blocks of batch // G consecutive rows, as ACDC and SP stack their τ or λ)."""
    parts: tuple[tuple[Chunk, torch.Tensor], ...] = ()
    """weights split by the chunk of their source: (chunk, [G, readers, the plan's sources of that
    chunk]), zero where this group has no edge (Plan.make fills it)."""

    def delta(self, plan: Differences) -> torch.Tensor:
        """[G, readers, batch // G, pos, d_model]: one product per chunk of senders with the pass's
        differences of that chunk (Plan.diff: each is subtracted and stacked once per pass, not
        once per reading layer), accumulated, so the rows of a block are one wide matrix product."""
        G, r = int(self.weights.shape[0]), int(self.weights.shape[1])
        out = None
        for chunk, w in self.parts:
            D = plan.diff(chunk, G)  # [G, s, (batch // G)·pos·d]
            # In place: an out-of-place baddbmm copies the whole sum first (autograd allows it: a
            # product's backward reads its factors, not its result).
            out = torch.bmm(w, D) if out is None else out.baddbmm_(w, D)
        assert out is not None
        b, p, d = plan.out[self.sources[0]].shape
        return out.view(G, r, b // G, p, d)

    def one_sender(self) -> bool:
        """Whether every reader of the group reads one and the same writer (layer 0's q/k/v: the input)."""
        return sum(int(w.shape[2]) for _, w in self.parts) == 1

    def projected(self, plan: Differences, W: torch.Tensor) -> torch.Tensor:
        """[G, readers, (batch // G)·pos, d_head]: each reader's Δ_r W_r (W [readers, d_model, d_head]) for a
        group of one sender (one_sender): its difference projected through every reader's W at once, then
        weighted per reader, so Δ [G, readers, rows, pos, d_model] and its gradient are never made (on
        planted large-circuit's 297 q/k/v readers, a gigabyte each in every step of edge SP)."""
        (chunk, w), = [(c, w) for c, w in self.parts if w.shape[2]]
        G, R = int(w.shape[0]), int(w.shape[1])
        D = plan.diff(chunk, G)  # [G, 1, (batch // G)·pos·d]
        d, k = int(W.shape[1]), int(W.shape[2])
        DW = D.view(G, -1, d) @ W.permute(1, 0, 2).reshape(d, R * k)  # [G, rows·pos, R·k]
        return (DW.view(G, -1, R, k) * w[:, None, :, 0, None]).permute(0, 2, 1, 3)  # [G, R, rows·pos, k]


def make_group(readers: list[str], by_reader: Mapping[str, Mapping[str, Weight]],
               by_col: Mapping[str, Mapping[str, int]], batch: int, matrix: torch.Tensor | None,
               device: torch.device = torch.device("cpu")) -> Group:
    """The weights of every edge into these readers: given ones (by_reader) and columns of the
    edge matrix (by_col), which win where an edge has both."""
    sources = sorted({s for r in readers for by in (by_reader, by_col) for s in by.get(r, {})}, key=order)
    col = {s: i for i, s in enumerate(sources)}
    S = len(sources)
    given = [(i, col[s], w) for i, r in enumerate(readers) for s, w in by_reader.get(r, {}).items()]
    flat: list[int] = []  # [reader, source] position, flattened
    cols: list[int] = []  # its edge-matrix column
    for i, r in enumerate(readers):
        for s, j in by_col.get(r, {}).items():
            flat.append(i * S + col[s])
            cols.append(j)
    per_row = any(isinstance(w, torch.Tensor) and w.dim() > 0 for _, _, w in given)
    G = batch if per_row else int(matrix.shape[0]) if flat and matrix is not None else 1
    weights = torch.zeros(G, len(readers), S, device=device)
    for i, c, w in given:
        weights[:, i, c] = w
    if flat:  # one gather (and, backwards, one scatter) for every matrix weight of the group
        assert matrix is not None
        picked = matrix[:, torch.tensor(cols, device=device)].to(weights.dtype)  # [blocks, entries]
        if G != picked.shape[0]:  # per-row weights beside block weights: every row its own
            picked = picked.repeat_interleave(G // picked.shape[0], dim=0)
        weights = weights.flatten(1).index_copy(1, torch.tensor(flat, device=device), picked).view_as(weights)
    return Group(sources=tuple(sources), weights=weights)


def split_group(group: Group, cover: list[Chunk], chunk_sources: Mapping[Chunk, tuple[str, ...]]) -> Group:
    """The group with its weights split by the chunks of its cover, columns as in the plan's
    chunk_sources (zero where this group has no edge from that writer)."""
    col = {s: i for i, s in enumerate(group.sources)}
    parts = []
    for chunk in cover:
        names = chunk_sources.get(chunk, ())
        mine = [(j, col[s]) for j, s in enumerate(names) if s in col]
        if not mine:
            continue
        if len(mine) == len(names):
            w = group.weights[:, :, [c for _, c in mine]]
        else:
            at, cols = (torch.tensor(x, device=group.weights.device) for x in zip(*mine))
            w = group.weights.new_zeros(*group.weights.shape[:2], len(names)).index_copy(
                2, at, group.weights[:, :, cols])
        parts.append((chunk, w))
    covered = {s for chunk in cover for s in chunk_sources.get(chunk, ())}
    assert covered >= set(group.sources), f"no chunk holds {set(group.sources) - covered}"
    assert len(covered) == sum(len(chunk_sources.get(c, ())) for c in cover), f"overlapping chunks {cover}"
    return dataclasses.replace(group, parts=tuple(parts))


# ---- dense weights per reader group, laid out once (ACDC) ----

GroupKey = tuple[str, int]
"""A reader group: ("a", l) the q, k and v inputs of layer l's heads (readers q0..q{H-1}, k0..,
v0..), ("m", l) layer l's MLP, ("logits", 0) the unembedding."""


def group_cover(key: GroupKey, n_layers: int) -> list[Chunk]:
    """The chunks that hold every writer a reader group reads."""
    kind, layer = key
    if kind == "logits":
        return logits_cover(n_layers)
    return chunk_cover(layer, kind == "m")


def feeds(writer: str, key: GroupKey) -> bool:
    """Whether a writer comes before a group's readers: earlier layers and the input feed every
    reader, an MLP also reads its own layer's heads."""
    w_layer, w_head = order(writer)
    kind, layer = key
    return kind == "logits" or w_layer < layer or (kind == "m" and w_layer == layer and w_head != 1 << 30)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupLayout:
    """Which writers each reader group's dense weights have columns for, and how those columns
    split into the plan's chunks: worked out once for a sweep whose passes change only the
    weights (ACDC builds one per start block), where Plan.make would rebuild it from 10^4 edge
    keys in every pass."""

    n_layers: int
    """Blocks of the model."""
    sources: Mapping[GroupKey, tuple[str, ...]]
    """Group -> the writers its weights have columns for, forward order."""
    chunk_sources: Mapping[Chunk, tuple[str, ...]]
    """Chunk -> the writers of that chunk some group has, forward order (Plan.chunk_sources)."""
    splits: Mapping[GroupKey, tuple[tuple[Chunk, torch.Tensor, torch.Tensor | None], ...]]
    """Group -> per chunk it reads: (chunk, its columns of that chunk's writers, where they sit
    among the chunk's writers, None when it has all of them)."""

    @classmethod
    def make(cls, sources: Mapping[GroupKey, tuple[str, ...]], n_layers: int,
             device: torch.device = torch.device("cpu")) -> GroupLayout:
        chunks: dict[Chunk, set[str]] = {}
        covers = {key: group_cover(key, n_layers) for key in sources}
        for key, names in sources.items():
            if list(names) != sorted(dict.fromkeys(names), key=order):
                raise ValueError(f"the writers of group {key} must be distinct, in forward order")
            for s in names:
                if not feeds(s, key):
                    raise ValueError(f"{s} does not feed the readers of group {key}")
                chunk = next(c for c in covers[key] if in_chunk(s, c))
                chunks.setdefault(chunk, set()).add(s)
        chunk_sources = {c: tuple(sorted(chunks[c], key=order)) for c in sorted(chunks)}
        splits = {}
        for key, names in sources.items():
            col = {s: i for i, s in enumerate(names)}
            parts = []
            for chunk in covers[key]:
                mine = [(j, col[s]) for j, s in enumerate(chunk_sources.get(chunk, ())) if s in col]
                if mine:
                    at, cols = zip(*mine)
                    whole = len(mine) == len(chunk_sources[chunk])
                    parts.append((chunk, torch.tensor(cols, device=device),
                                  None if whole else torch.tensor(at, device=device)))
            splits[key] = tuple(parts)
        return cls(n_layers=n_layers, sources=dict(sources), chunk_sources=chunk_sources, splits=splits)

    def group(self, key: GroupKey, weights: torch.Tensor) -> Group:
        """The Group of these weights [G, readers, len(sources[key])], split by chunk."""
        parts = []
        for chunk, cols, at in self.splits[key]:
            w = weights.index_select(2, cols)
            if at is not None:
                w = weights.new_zeros(*weights.shape[:2], len(self.chunk_sources[chunk])).index_copy(2, at, w)
            parts.append((chunk, w))
        return Group(sources=self.sources[key], weights=weights, parts=tuple(parts))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupWeights:
    """Edge patches as dense weights per reader group on a GroupLayout (Adapter.run's `groups`)."""

    layout: GroupLayout
    weights: Mapping[GroupKey, torch.Tensor]
    """Group -> [G, readers, len(layout.sources[group])], G a divisor of the batch (row blocks);
    groups left out patch nothing."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Offsets:
    """Fixed changes added to readers' inputs in a pass: what the edge patches from writers that no
    pass of a sweep changes sum to (ACDC: writers before the pass's start block, whose reference -
    current is the same in every pass), summed once by the sweep instead of in every pass."""

    qkv: Mapping[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    """Layer -> the change of its heads' queries, keys and values [batch, pos, 3, H, d_head]: a
    change of their inputs through W_Q, W_K and W_V (no bias; zoo models have no LayerNorm)."""
    resid: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    """`m{l}` or `logits` -> the change of that reader's input [batch, pos, d_model]."""


def keyed_groups(a: Any, by_reader: Mapping[str, Mapping[str, Weight]], by_col: Mapping[str, Mapping[str, int]],
                  batch: int, matrix: torch.Tensor | None):
    """eval.patching.hook_plan.Plan.make's groups and chunk writers from edges given by name (weights, edge-matrix columns)."""
    H, device = a.n_heads, a.attn["W_O"].device
    attn_groups, mlp_groups = {}, {}
    for layer in range(a.n_layers):
        readers = [head_node(layer, h, x) for x in QKV for h in range(H)]
        if any(r in by_reader or r in by_col for r in readers):
            attn_groups[layer] = make_group(readers, by_reader, by_col, batch, matrix, device)
        if mlp_node(layer) in by_reader or mlp_node(layer) in by_col:
            mlp_groups[layer] = make_group([mlp_node(layer)], by_reader, by_col, batch, matrix, device)
    logits_group = (make_group([LOGITS], by_reader, by_col, batch, matrix, device)
                    if LOGITS in by_reader or LOGITS in by_col else None)
    keyed = {**{("a", l): g for l, g in attn_groups.items()}, **{("m", l): g for l, g in mlp_groups.items()},
             **({("logits", 0): logits_group} if logits_group is not None else {})}
    covers = {key: (g, group_cover(key, a.n_layers)) for key, g in keyed.items()}
    chunks: dict[Chunk, set[str]] = {}
    for group, cover in covers.values():
        for chunk in cover:
            mine = {src for src in group.sources if in_chunk(src, chunk)}
            if mine:
                chunks.setdefault(chunk, set()).update(mine)
    chunk_sources = {c: tuple(sorted(chunks[c], key=order)) for c in sorted(chunks)}
    split = {key: split_group(group, cover, chunk_sources) for key, (group, cover) in covers.items()}
    return ({l: split[("a", l)] for l in attn_groups}, {l: split[("m", l)] for l in mlp_groups},
            split.get(("logits", 0)), chunk_sources)


def given_groups(a: Any, groups: GroupWeights, batch: int, first: int):
    """eval.patching.hook_plan.Plan.make's groups and chunk writers from dense weights on a GroupLayout: the layout's
    column split, no per-edge work."""
    layout, H = groups.layout, a.n_heads
    if layout.n_layers != a.n_layers:
        raise ValueError(f"a group layout for {layout.n_layers} layers, the model has {a.n_layers}")
    attn, mlp, logits = {}, {}, None
    for key, w in groups.weights.items():
        kind, layer = key
        if key not in layout.sources:
            raise ValueError(f"group {key} is not in the layout")
        rows = 3 * H if kind == "a" else 1
        if w.dim() != 3 or w.shape[1:] != (rows, len(layout.sources[key])) or batch % max(1, w.shape[0]):
            raise ValueError(f"group {key} weights must be [a divisor of {batch}, {rows}, "
                             f"{len(layout.sources[key])}], got {list(w.shape)}")
        if kind != "logits" and layer < first:
            raise ValueError(f"a pass starting at block {first} cannot patch group {key}: it comes before it")
        group = layout.group(key, w)
        if kind == "a":
            attn[layer] = group
        elif kind == "m":
            mlp[layer] = group
        else:
            logits = group
    used = {c for key in groups.weights for c, _, _ in layout.splits[key]}
    return attn, mlp, logits, {c: layout.chunk_sources[c] for c in layout.chunk_sources if c in used}
