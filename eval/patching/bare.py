"""The blocks of a zoo HookedTransformer written out over its own weights, for the passes of exact
ACDC and batched edge patching: no TransformerLens hook points on the hot path.

Why: those methods run 10^4 small passes (rows of 10 positions, d_model 32-96) that each start at
some block from the clean state. Through TransformerLens a block runs at a fifth of the rate the
same arithmetic runs at written out (hook-point calls, einops rearranges, a softmax over 10 keys
slower than its exp and sums), and patching q/k/v through hooks projects the residual and the
patch separately. Here a reader group's patched inputs are projected once (`qkv`): the residual
plus each reader's summed patch through that reader's W_Q, W_K or W_V, the arithmetic of an
unpatched pass.

Only 3.x HookedTransformers without LayerNorm, with standard attention and a relu or gelu MLP
(what eval.core.model_config allows) are written out (`bare_model` is None otherwise, and callers
keep the hooked path); the logits are the hooked pass's up to float rounding
(tests/test_eval/test_bare.py). The unembedding is the model's own module, so forward hooks on it
(benchmarks count passes there) still fire.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from eval.core import tlens
from eval.core.circuit import head_node, mlp_node, parse_node

QKV = ("q", "k", "v")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BareModel:
    """A model's block weights, stacked per layer as the written-out pass reads them."""

    n_layers: int
    n_heads: int
    d_head: int
    W_qkv: torch.Tensor
    """[L, 3H, d_model, d_head]: readers q0..q{H-1}, k0.., v0.. (eval.patching.hooks' order)."""
    W_cat: torch.Tensor
    """[L, d_model, 3·H·d_head]: the same as one product for an unpatched layer."""
    b_qkv: torch.Tensor
    """[L, 3, H, d_head]."""
    W_O: torch.Tensor
    """[L, H, d_head, d_model]."""
    b_O: torch.Tensor
    W_in: torch.Tensor
    b_in: torch.Tensor
    W_out: torch.Tensor
    b_out: torch.Tensor
    act: Callable[[torch.Tensor], torch.Tensor]
    causal: bool
    scale: float
    """What attention scores are divided by (cfg.attn_scale)."""
    unembed: Any
    """The model's unembedding module."""


def bare_model(model: Any) -> BareModel | None:
    """The written-out form of a zoo-shaped 3.x HookedTransformer, or None where its blocks do
    something this module does not write out (a bridge, LayerNorm, other attention or MLPs)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or tlens.is_bridge(model) or not hasattr(model, "blocks"):
        return None
    plain = (cfg.normalization_type is None and cfg.act_fn in ("relu", "gelu") and not cfg.attn_only
             and cfg.attention_dir in ("causal", "bidirectional") and cfg.positional_embedding_type == "standard"
             and not getattr(cfg, "gated_mlp", False) and getattr(cfg, "n_key_value_heads", None) is None
             and getattr(cfg, "attn_scores_soft_cap", -1.0) in (None, -1.0)
             and not getattr(cfg, "use_attention_sinks", False) and not getattr(cfg, "use_local_attn", False)
             and not getattr(cfg, "use_logn_attn", False) and getattr(cfg, "clip_qkv", None) is None
             and getattr(cfg, "original_architecture", None) is None and cfg.dtype == torch.float32)
    if not plain:
        return None
    L = int(cfg.n_layers)

    def stack(name: str) -> torch.Tensor:
        return torch.stack([getattr(model.blocks[l], name.split(".")[0]).get_parameter(name.split(".")[1]).detach()
                            for l in range(L)])

    W_qkv = torch.cat([stack(f"attn.W_{x}") for x in "QKV"], dim=1)  # [L, 3H, d, dh]
    H, dh = int(cfg.n_heads), int(cfg.d_head)
    return BareModel(n_layers=L, n_heads=H, d_head=dh, W_qkv=W_qkv,
                     W_cat=W_qkv.permute(0, 2, 1, 3).reshape(L, W_qkv.shape[2], 3 * H * dh),
                     b_qkv=torch.stack([stack(f"attn.b_{x}") for x in "QKV"], dim=1),
                     W_O=stack("attn.W_O"), b_O=stack("attn.b_O"), W_in=stack("mlp.W_in"), b_in=stack("mlp.b_in"),
                     W_out=stack("mlp.W_out"), b_out=stack("mlp.b_out"),
                     act=torch.relu if cfg.act_fn == "relu" else torch.nn.functional.gelu,
                     causal=cfg.attention_dir == "causal", scale=float(cfg.attn_scale), unembed=model.unembed)


def key_mask(bm: BareModel, attention_mask: torch.Tensor | None, n: int, pos: int, device: torch.device) -> torch.Tensor:
    """[n, 1, pos, pos] bool: which keys each query attends to, as TransformerLens 3.x masks them
    (causal, and padded keys of a [n, pos] 0/1 attention mask left out)."""
    allowed = torch.ones(pos, pos, dtype=torch.bool, device=device)
    if bm.causal:
        allowed = allowed.tril()
    allowed = allowed.expand(n, 1, pos, pos)
    if attention_mask is not None and bm.causal:  # 3.x masks padded keys only under causal attention
        allowed = allowed & attention_mask.bool().view(n, 1, 1, pos)
    return allowed


def attention(bm: BareModel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """z [blocks, n, H, pos, d_head] from q, k, v of that shape; `allowed` [n, 1, pos, pos].
    The softmax is written out: over 10 keys torch's own is several times slower than these
    five elementwise kernels. A query with no key left (3.x's NaN row) gets a zero pattern."""
    s = torch.matmul(q, k.transpose(-1, -2)).div_(bm.scale).masked_fill_(~allowed, -math.inf)
    top = s.amax(-1, keepdim=True).clamp_min_(torch.finfo(s.dtype).min)
    e = s.sub_(top).exp_()
    # A row with an allowed key sums to >= 1 (its largest term is exp(0)): the clamp only turns 0/0 into 0.
    return torch.matmul(e.div_(e.sum(-1, keepdim=True).clamp_min_(torch.finfo(s.dtype).tiny)), v)


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


def qkv(bm: BareModel, layer: int, x: torch.Tensor, w: torch.Tensor | None, D: torch.Tensor,
        rows: Sequence[Rows] | None = None, offset: torch.Tensor | None = None) -> torch.Tensor:
    """Queries, keys and values [blocks, n, 3, H, pos, d_head] of residual x [blocks, n, pos, d],
    reader r of block b reading x + Σ_s w[b, r, s] D[b, s] (w None: nothing patched; rows: w's
    blocks compacted already, else compacted here; offset: a fixed change of them,
    [k, n, pos, 3, H, d_head]).

    The residual is projected for every reader at once (one wide product), and each block's
    patches are summed and projected while they are in cache: the sum is [3H, n·pos·d_model],
    3H times the residual, and reading it back from memory took longer than both products.
    The projection runs as W^T · Δ^T, a d_head-row product: with d_head columns out (Δ · W)
    it ran at a fifth of the rate."""
    kb, n, p, d = x.shape
    H, dh = bm.n_heads, bm.d_head
    out = (x.reshape(-1, d) @ bm.W_cat[layer]).view(kb, n, p, 3 * H, dh)
    if w is not None:
        WT = bm.W_qkv[layer].transpose(1, 2)  # [3H, d_head, d_model]
        for b, (U, at, inv) in enumerate(rows if rows is not None else (compact(wb) for wb in w)):
            if len(at) == 0:
                continue
            # One sum per distinct row, then each patched reader projects its own (W^T·Δ^T).
            delta = torch.mm(U, D[b, :U.shape[1]]).view(len(U), n * p, d)
            if inv is not None:
                delta = delta.index_select(0, inv)
            proj = torch.bmm(WT.index_select(0, at), delta.transpose(1, 2)).view(len(at), dh, n, p)
            out[b].index_add_(2, at, proj.permute(2, 3, 0, 1))
    out = out.view(kb, n, p, 3, H, dh)
    if offset is not None:  # [k, n, pos, 3, H, d_head]: the same layout
        out += offset
    return (out + bm.b_qkv[layer].view(1, 1, 1, 3, H, dh)).permute(0, 1, 3, 4, 2, 5)


ENTRIES = ("run",)
"""The functions that run a written-out pass (benchmarks wrap them to count its rows and blocks)."""

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
    rows: dict[GroupKey, Sequence[Rows]] = dataclasses.field(default_factory=dict)
    """Group ("a", l) -> its weights per block compacted (`compact`), where the caller keeps them."""
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


def _sum(p: Patches, key: GroupKey, D: torch.Tensor) -> torch.Tensor | None:
    """Σ_s w[r, s] D_s for a group [k, readers, n·pos·d] (None: nothing patched into it)."""
    w = p.weights.get(key)
    if w is None:
        return None
    return torch.bmm(w, D[:, :w.shape[2]])


def run(bm: BareModel, p: Patches, k: int, allowed: torch.Tensor) -> torch.Tensor:
    """Logits [k·n, pos, d_vocab_out] of k row blocks patched as `p` says, from block p.start."""
    n, pos, d = p.resid.shape
    H, per = bm.n_heads, bm.n_heads + 1
    x = p.resid.unsqueeze(0).expand(k, n, pos, d).contiguous()
    S = (bm.n_layers - p.start) * per
    D = x.new_empty(k, S, n * pos * d)  # reference - current of each live writer, filled as it runs
    ref = p.reference.view(1, S, n * pos * d)
    for layer in range(p.start, bm.n_layers):
        j = (layer - p.start) * per
        q, kk, v = qkv(bm, layer, x, p.weights.get(("a", layer)), D, p.rows.get(("a", layer)),
                       p.qkv_offsets.get(layer)).unbind(2)  # each [k, n, H, pos, dh]
        z = attention(bm, q, kk, v, allowed)
        x = x + _heads(bm, layer, z, ref[0, j:j + H], D[:, j:j + H]).view(k, n, pos, d)
        m_in = _input(p, ("m", layer), x, D)
        out = bm.act(m_in.view(-1, d) @ bm.W_in[layer] + bm.b_in[layer]) @ bm.W_out[layer] + bm.b_out[layer]
        torch.sub(ref[:, j + H], out.view(k, -1), out=D[:, j + H])
        x = x + out.view(k, n, pos, d)
    return bm.unembed(_input(p, ("logits", 0), x, D).view(k * n, pos, d))


def _heads(bm: BareModel, layer: int, z: torch.Tensor, ref: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """The attention output [k·n·pos, d_model] of z [k, n, H, pos, d_head], with each head's
    reference - output written into D [k, H, n·pos·d_model] (ref: [H, n·pos·d_model]). The
    difference comes straight out of one product per block (ref - z_h W_O[h]): the heads' outputs
    are never stored, then read back to subtract and to sum, which cost more than the products.
    Their sum is one product over all heads instead."""
    k, n, H, pos, dh = z.shape
    d = ref.shape[-1] // (n * pos)
    zh = z.transpose(1, 2).reshape(k, H, n * pos, dh)
    ref = ref.view(H, n * pos, d)
    for b in range(k):
        torch.baddbmm(ref, zh[b], bm.W_O[layer], alpha=-1.0, out=D[b].view(H, n * pos, d))
    return torch.addmm(bm.b_O[layer], z.permute(0, 1, 3, 2, 4).reshape(k * n * pos, H * dh),
                       bm.W_O[layer].reshape(H * dh, d))


def _input(p: Patches, key: GroupKey, x: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """A residual reader's input: x plus its edge patches and fixed offset."""
    delta = _sum(p, key, D)
    if delta is not None:
        x = x + delta.view(x.shape)
    if key in p.resid_offsets:
        x = x + p.resid_offsets[key]
    return x


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
    An edge from a writer before the start moves its reader by the same amount in every pass
    (reference - clean): that goes in as an offset, through W_Q/K/V for a head's input."""
    s, k = start.layer, len(sets)
    resid = start.resid
    n, pos, d = resid.shape
    live = live_writers(bm, s)
    at = {w: i for i, w in enumerate(live)}
    weights: dict[GroupKey, torch.Tensor] = {}
    qkv_off: dict[int, torch.Tensor] = {}
    resid_off: dict[GroupKey, torch.Tensor] = {}
    for b, patch in enumerate(sets):
        for (src, reader), wt in patch.items():
            key, row = slot(reader, bm.n_heads)
            if src in at:
                if key not in weights:
                    weights[key] = resid.new_zeros(k, 3 * bm.n_heads if key[0] == "a" else 1, prefix(bm, s, key))
                weights[key][b, row, at[src]] += float(wt)
                continue
            move = float(wt) * (reference[src] - start.outputs[src]).expand(n, pos, d)
            if key[0] == "a":
                off = qkv_off.setdefault(key[1], resid.new_zeros(k, n, pos, 3 * bm.n_heads, bm.d_head))
                off[b, :, :, row] += move @ bm.W_qkv[key[1], row]
            else:
                resid_off.setdefault(key, resid.new_zeros(k, n, pos, d))[b] += move
    ref = torch.stack([reference[w].expand(n, pos, d) for w in live])
    return Patches(start=s, resid=resid, reference=ref, weights=weights, resid_offsets=resid_off,
                   qkv_offsets={l: o.view(k, n, pos, 3, bm.n_heads, bm.d_head) for l, o in qkv_off.items()})
