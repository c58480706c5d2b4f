"""What a written-out pass (eval.patching.bare) patches: a pass's Patches, a reader group's
patches packed for every row block at once (Packed), and how exact edge patching builds them
(edge_patches). Private to eval.patching.bare, which re-exports these; split off to keep each module
readable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from eval.core.circuit import head_node, mlp_node, parse_node

BareModel = Any
"""eval.patching.bare.BareModel (not imported: that module imports this one)."""

QKV = ("q", "k", "v")

Rows = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
"""A block's weights of one reader group, compacted: (its distinct nonzero rows [u, writers], the
readers with a patch [r], which distinct row each reads [r], None when they are the same)."""


def compact(w: torch.Tensor) -> Rows:
    """One block's [readers, writers] weights as Rows. ACDC's 0/1 rows repeat: at 8x8 a block's
    3H readers of a layer hold about 19 nonzero rows and 9 distinct ones."""
    at = w.any(1).nonzero().flatten()
    if len(at) == 0:
        return w[:0], at, None
    U, inv = torch.unique(w.index_select(0, at), dim=0, return_inverse=True)
    return U, at, inv


@dataclasses.dataclass(frozen=True, kw_only=True)
class Packed:
    """The patches of one reader group in a pass, every row block at once, where each patched
    (block, reader) reads either a weighted sum of the live writers' differences or one of them:

    - sum: `rows` [k, u, writers] holds each block's distinct nonzero weight rows (zero-padded to
      u), summed by one batched product into k·u sums. Each sum is projected where it lies for the
      reader `dst` names (its first reader); the readers that share a sum with an earlier one are
      `src` (which sum) and `more` (which reader), gathered. Why: a gathered copy of every patched
      reader's sum is one more buffer of megabytes a layer (109 rows of 80 kB at 8x8, where 49
      readers share a sum), and writing memory not recently used is what such a pass pays for
      (docs/methods.md, cost model);
    - gather (rows None): `src` picks each patched reader `dst` one difference among the k·(live
      writers) of the pass, times `scale` (edge patching: one edge a block)."""

    rows: torch.Tensor | None
    src: torch.Tensor | None
    """sum: [e] the sum each reader of `more` reads (None: none shares one); gather: [r]."""
    dst: torch.Tensor
    """Readers as block·readers + reader, blocks in order. sum: [k·u] the reader each sum is
    projected for (a padding row's, whose sum is zero: its block's reader 0); gather: [r]."""
    more: torch.Tensor | None = None
    """sum: [e] the readers that read a sum another reader was projected for (None: none)."""
    scale: torch.Tensor | None = None
    """gather: [r] weights of the gathered differences (None: 1)."""

    def __post_init__(self) -> None:
        if self.rows is None:
            if self.src is None or len(self.src) != len(self.dst) or self.more is not None:
                raise ValueError("a gathering Packed has one source per patched reader and no `more`")
        elif len(self.dst) != self.rows.shape[0] * self.rows.shape[1] or (self.src is None) != (self.more is None):
            raise ValueError("a summing Packed projects each of its k·u sums for one reader")


def pack(blocks: Sequence[Rows], readers: int) -> Packed | None:
    """The Packed sums of k blocks' compacted rows (None: nothing patched)."""
    u = max(len(U) for U, _, _ in blocks)
    if u == 0:
        return None
    k, S = len(blocks), blocks[0][0].shape[1]
    rows = blocks[0][0].new_zeros(k, u, S)
    dst = torch.arange(k, device=rows.device).repeat_interleave(u) * readers  # padding rows: reader 0
    src, more = [], []
    for b, (U, at, inv) in enumerate(blocks):
        rows[b, :len(U)] = U
        if inv is None:
            dst[b * u:b * u + len(at)] += at
            continue
        i = torch.arange(len(inv), device=at.device)
        first = torch.full((len(U),), len(inv), device=at.device).scatter_reduce_(0, inv, i, "amin")
        dst[b * u:b * u + len(U)] += at[first]
        rest = torch.ones(len(inv), dtype=torch.bool, device=at.device).index_fill_(0, first, False)
        src.append(b * u + inv[rest])
        more.append(b * readers + at[rest])
    src_t = torch.cat(src) if src else None
    if src_t is None or len(src_t) == 0:
        return Packed(rows=rows, src=None, dst=dst)
    return Packed(rows=rows, src=src_t, dst=dst, more=torch.cat(more))


GroupKey = tuple[str, int]
"""As eval.patching.edge_groups.GroupKey: ("a", l) layer l's q/k/v readers, ("m", l), ("logits", 0)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Patches:
    """The edge patches of one written-out pass from block `start`, k row blocks of n rows.

    Live writers are those the pass recomputes, forward order: block start's heads, its MLP, the
    next block's heads, ... A group's weights have one column per live writer that feeds it, which
    is always a prefix of that order (earlier blocks, and for an MLP its own heads too)."""

    start: int
    resid: torch.Tensor
    """The clean resid_pre of block `start` [n, pos, d_model]."""
    reference: torch.Tensor
    """[live writers, n, pos, d_model]: what each live writer is patched towards."""
    weights: dict[GroupKey, torch.Tensor]
    """Group -> [k, readers, its prefix of live writers] (0/1 or any weight); groups left out patch nothing."""
    packed: dict[GroupKey, Packed | None] = dataclasses.field(default_factory=dict)
    """Group -> its weights packed already (`pack`; None: nothing patched), where the caller
    keeps them; other groups of `weights` are packed here."""
    qkv_offsets: dict[int, torch.Tensor]
    """Layer -> fixed change of its q/k/v [k, n, pos, 3, H, d_head] (eval.patching.edge_groups.Offsets' layout)."""
    resid_offsets: dict[GroupKey, torch.Tensor]
    """("m", l) or ("logits", 0) -> fixed change of that reader's input [k, n, pos, d_model]."""


def prefix(bm: BareModel, start: int, key: GroupKey) -> int:
    """How many live writers (from block `start`) feed a reader group."""
    kind, layer = key
    per = bm.n_heads + 1
    if kind == "logits":
        return (bm.n_layers - start) * per
    return (layer - start) * per + (bm.n_heads if kind == "m" else 0)


def slot(reader: str, n_heads: int) -> tuple[GroupKey, int]:
    """A q/k/v-level reader's group and its row in the group's weights (q0..q{H-1}, k0.., v0..)."""
    node = parse_node(reader)
    if node.kind == "logits":
        return ("logits", 0), 0
    if node.kind == "mlp":
        return ("m", node.layer), 0
    if node.qkv is None:
        raise ValueError(f"{reader!r} is a whole head: give its q, k and v inputs")
    return ("a", node.layer), QKV.index(node.qkv) * n_heads + node.head


def live_writers(bm: BareModel, start: int) -> list[str]:
    """The writers a pass from block `start` recomputes, in the order Patches lays them out."""
    return [w for l in range(start, bm.n_layers) for w in (*(head_node(l, h) for h in range(bm.n_heads)), mlp_node(l))]


def edge_patches(bm: BareModel, start: Any, reference: Mapping[str, torch.Tensor],
                 sets: Sequence[Mapping[tuple[str, str], float]]) -> Patches:
    """The Patches of k = len(sets) row blocks from the clean state `start` (eval.patching.hooks.Start),
    block i patching the q/k/v-level edges of sets[i] with their weights towards `reference`.
    An edge from a live writer gathers that writer's difference into its reader (Packed without
    rows: edge patching has one edge a block, no sums). An edge from a writer before the start
    moves its reader by the same amount in every pass (reference - clean): that goes in as an
    offset, through W_Q/K/V for a head's input."""
    s, k = start.layer, len(sets)
    resid = start.resid
    n, pos, d = resid.shape
    live = live_writers(bm, s)
    at = {w: i for i, w in enumerate(live)}
    gathered: dict[GroupKey, list[tuple[int, int, float]]] = {}
    qkv_off: dict[int, torch.Tensor] = {}
    resid_off: dict[GroupKey, torch.Tensor] = {}
    for b, patch in enumerate(sets):
        for (src, reader), wt in patch.items():
            key, row = slot(reader, bm.n_heads)
            if src in at:
                readers = 3 * bm.n_heads if key[0] == "a" else 1
                gathered.setdefault(key, []).append((b * len(live) + at[src], b * readers + row, float(wt)))
                continue
            move = float(wt) * (reference[src] - start.outputs[src]).expand(n, pos, d)
            if key[0] == "a":
                off = qkv_off.setdefault(key[1], resid.new_zeros(k, n, pos, 3 * bm.n_heads, bm.d_head))
                off[b, :, :, row] += move @ bm.W_qkv[key[1], row]
            else:
                resid_off.setdefault(key, resid.new_zeros(k, n, pos, d))[b] += move
    packed = {}
    for key, entries in gathered.items():
        src, dst, wts = (torch.tensor(x, device=resid.device) for x in zip(*entries))
        packed[key] = Packed(rows=None, src=src, dst=dst, scale=None if bool((wts == 1).all()) else wts.to(resid.dtype))
    ref = torch.stack([reference[w].expand(n, pos, d) for w in live])
    return Patches(start=s, resid=resid, reference=ref, weights={}, packed=packed, resid_offsets=resid_off,
                   qkv_offsets={l: o.view(k, n, pos, 3, bm.n_heads, bm.d_head) for l, o in qkv_off.items()})
