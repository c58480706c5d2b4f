"""The blocks of a zoo HookedTransformer written out over its own weights, for the passes of exact
ACDC and batched edge patching: no TransformerLens hook points on the hot path.

Why: those methods run 10^4 small passes (rows of 10 positions, d_model 32-96) that each start at
some block from the clean state, where each kernel call costs about as much as its arithmetic.
Through TransformerLens a block ran at a fifth of the rate of the same arithmetic written out
(hook-point calls, einops rearranges, torch's softmax over 10 keys). Here a pass is few, wide
kernels: the residual projected for every q/k/v reader at once, only patched readers' sums
projected on their own (`qkv`), the differences reference - current that later readers sum
written straight out of the head products (`_heads`), a softmax without exp of -inf or of
subnormals (`attention`).

Only 3.x HookedTransformers without LayerNorm, with standard attention and a relu or gelu MLP
(what eval.core.model_config allows) are written out (`bare_model` is None otherwise, and callers
keep the hooked path); the logits are the hooked pass's up to float rounding
(tests/test_eval/test_bare.py). The unembedding is the model's own module, so forward hooks on it
(benchmarks count passes there) still fire.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from eval.core import tlens
from eval.patching.bare_patches import (  # noqa: F401 (public here)
    GroupKey,
    Packed,
    Patches,
    Rows,
    compact,
    edge_patches,
    live_writers,
    pack,
    prefix,
    slot,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BareModel:
    """A model's block weights, stacked per layer as the written-out pass reads them."""

    n_layers: int
    n_heads: int
    d_head: int
    W_qkv: torch.Tensor
    """[L, 3H, d_model, d_head]: readers q0..q{H-1}, k0.., v0.. (eval.patching.hooks' order)."""
    W_qkvT: torch.Tensor
    """[L, 3H, d_head, d_model]: the same transposed, contiguous."""
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
    unembed: Callable[[torch.Tensor], torch.Tensor]
    """The model's unembedding module (a HookedTransformer's; W_U x + b_U for siit's Transformer)."""


def bare_model(model: Any) -> BareModel | None:
    """The written-out form of a zoo-shaped 3.x HookedTransformer (or of a model that declares it
    computes one's forward, HOOKED_FORWARD: siit's Transformer), or None where its blocks do something
    this module does not write out (a bridge, LayerNorm, other attention or MLPs)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or tlens.is_bridge(model):
        return None
    own = bool(getattr(model, HOOKED_FORWARD, False))
    if not own and not type(model).__module__.startswith("transformer_lens."):
        return None
    plain = (cfg.normalization_type is None and cfg.act_fn in ("relu", "gelu") and not getattr(cfg, "attn_only", False)
             and cfg.attention_dir in ("causal", "bidirectional") and cfg.positional_embedding_type == "standard"
             and not getattr(cfg, "gated_mlp", False) and getattr(cfg, "n_key_value_heads", None) is None
             and getattr(cfg, "attn_scores_soft_cap", -1.0) in (None, -1.0)
             and not getattr(cfg, "use_attention_sinks", False) and not getattr(cfg, "use_local_attn", False)
             and not getattr(cfg, "use_logn_attn", False) and getattr(cfg, "clip_qkv", None) is None
             and getattr(cfg, "original_architecture", None) is None
             and getattr(cfg, "dtype", torch.float32) == torch.float32
             and all(p.dtype == torch.float32 for p in model.parameters()))
    if not plain:
        return None
    L = int(cfg.n_layers)

    def stack(name: str) -> torch.Tensor:
        return torch.stack([getattr(model.blocks[l], name.split(".")[0]).get_parameter(name.split(".")[1]).detach()
                            for l in range(L)])

    W_qkv = torch.cat([stack(f"attn.W_{x}") for x in "QKV"], dim=1)  # [L, 3H, d, dh]
    H, dh = int(cfg.n_heads), int(cfg.d_head)
    # siit's Transformer scales by sqrt(d_head), as TransformerLens does by default; its unembedding
    # holds W_U and b_U without a forward
    scale = float(getattr(cfg, "attn_scale", math.sqrt(dh)))
    W_U, b_U = model.unembed.W_U.detach(), model.unembed.b_U.detach()
    unembed = functools.partial(_unembed, W_U, b_U) if own else model.unembed
    return BareModel(n_layers=L, n_heads=H, d_head=dh, W_qkv=W_qkv, W_qkvT=W_qkv.transpose(2, 3).contiguous(),
                     W_cat=W_qkv.permute(0, 2, 1, 3).reshape(L, W_qkv.shape[2], 3 * H * dh),
                     b_qkv=torch.stack([stack(f"attn.b_{x}") for x in "QKV"], dim=1),
                     W_O=stack("attn.W_O"), b_O=stack("attn.b_O"), W_in=stack("mlp.W_in"), b_in=stack("mlp.b_in"),
                     W_out=stack("mlp.W_out"), b_out=stack("mlp.b_out"),
                     act=torch.relu if cfg.act_fn == "relu" else torch.nn.functional.gelu,
                     causal=cfg.attention_dir == "causal", scale=scale, unembed=unembed)


HOOKED_FORWARD = "hooked_forward"
"""The class attribute (True) of a model that is not TransformerLens's but computes a 3.x
HookedTransformer's forward for its config over the same parameter names (siit.transformer.Transformer):
written out like one."""


def _unembed(W_U: torch.Tensor, b_U: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x @ W_U + b_U


MASKED = -1e30
"""Added to the score of a key a query may not see: exp(MASKED - top) is exp(EXP_FLOOR) after the
clamp, 1.8e-35 next to the row's largest term 1, so it weighs nothing a float can show."""
EXP_FLOOR = -80.0
"""Scores more than this below their row's largest are raised to it before exp: exp(-80) is
1.8e-35, nothing next to the largest term's 1, but a normal float. Below about -87 exp returns
subnormal floats, and exp of those (and of -inf) takes the slow path: 50 times slower on this
CPU, most of a softmax's time on real models' scores."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyMask:
    """Which keys each query attends to, as TransformerLens 3.x masks them, for the passes of one
    task: causal, and padded keys of a [n, pos] 0/1 attention mask left out."""

    allowed: torch.Tensor
    """[n, 1, pos, pos] bool."""
    every_query_sees_a_key: bool
    """False where some query sees none (3.x gives it a zero pattern): the pass then masks with
    -inf and zeroes after exp, the slower way."""
    bias: dict[tuple[int, int], torch.Tensor] = dataclasses.field(default_factory=dict)
    """(blocks, heads) -> the additive mask [blocks·n·heads, pos, pos] (0 or MASKED), made once."""

    def additive(self, k: int, H: int) -> torch.Tensor:
        if (k, H) not in self.bias:
            n, _, p, _ = self.allowed.shape
            add = torch.zeros(n, 1, p, p, device=self.allowed.device).masked_fill_(~self.allowed, MASKED)
            self.bias[(k, H)] = add.expand(k, n, H, p, p).reshape(k * n * H, p, p)
        return self.bias[(k, H)]


def key_mask(bm: BareModel, attention_mask: torch.Tensor | None, n: int, pos: int, device: torch.device) -> KeyMask:
    """The KeyMask of a task's attention mask [n, pos] (None: no padding)."""
    allowed = torch.ones(pos, pos, dtype=torch.bool, device=device)
    if bm.causal:
        allowed = allowed.tril()
    allowed = allowed.expand(n, 1, pos, pos)
    if attention_mask is not None and bm.causal:  # 3.x masks padded keys only under causal attention
        allowed = allowed & attention_mask.bool().view(n, 1, 1, pos)
    return KeyMask(allowed=allowed, every_query_sees_a_key=bool(allowed.any(-1).all()))


def attention(bm: BareModel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: KeyMask) -> torch.Tensor:
    """z [blocks, n, H, pos, d_head] from q, k, v of that shape. The softmax is written out: over
    10 keys torch's own is several times slower than these elementwise kernels, and each kernel
    call costs about as much as its arithmetic here, so there are few: the scale and the mask
    go in with the product (baddbmm), and exp never sees -inf or a subnormal (EXP_FLOOR)."""
    kb, n, H, pos, dh = q.shape
    if not mask.every_query_sees_a_key:
        return _attention_exact(bm, q, k, v, mask.allowed)
    s = torch.baddbmm(mask.additive(kb, H), q.reshape(-1, pos, dh), k.reshape(-1, pos, dh).transpose(1, 2),
                      alpha=1.0 / bm.scale)
    e = (s - s.amax(-1, keepdim=True)).clamp_min_(EXP_FLOOR).exp_()
    return torch.bmm(e.div_(e.sum(-1, keepdim=True)), v.reshape(-1, pos, dh)).view(kb, n, H, pos, dh)


def _attention_exact(bm: BareModel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     allowed: torch.Tensor) -> torch.Tensor:
    """attention where some query sees no key: left-out keys zeroed after exp, such a query's
    pattern all zero."""
    blocked = ~allowed
    s = torch.matmul(q, k.transpose(-1, -2)).div_(bm.scale).masked_fill_(blocked, -math.inf)
    top = s.amax(-1, keepdim=True).clamp_min_(torch.finfo(s.dtype).min)
    e = s.sub_(top).clamp_min_(EXP_FLOOR).exp_().masked_fill_(blocked, 0.0)
    # A row with an allowed key sums to >= 1 (its largest term is exp(0)): the clamp only turns 0/0 into 0.
    return torch.matmul(e.div_(e.sum(-1, keepdim=True).clamp_min_(torch.finfo(s.dtype).tiny)), v)


def _gathered(pk: Packed, D: torch.Tensor, nd: int) -> torch.Tensor:
    """[r, n·pos·d_model]: each patched reader's one difference (a gathering Packed)."""
    delta = D.view(-1, nd).index_select(0, pk.src)
    return delta if pk.scale is None else delta * pk.scale[:, None]


def _project(bm: BareModel, layer: int, readers: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """[r, d_head, n·pos]: patches delta [r, n·pos, d_model] through their readers' W_Q/K/V, as
    W^T · Δ^T, a d_head-row product: with d_head columns out (Δ · W) it ran at a fifth of the rate."""
    WT = bm.W_qkvT[layer].index_select(0, readers % (3 * bm.n_heads))  # [r, d_head, d_model]
    return torch.bmm(WT, delta.transpose(1, 2))


def qkv(bm: BareModel, layer: int, x: torch.Tensor, D: torch.Tensor, pk: Packed | None,
        offset: torch.Tensor | None = None) -> torch.Tensor:
    """Queries, keys and values [blocks, n, 3, H, pos, d_head] of residual x [blocks, n, pos, d],
    each patched reader (pk: its group's patches) reading x + its patch; offset: a fixed change of
    them, [k, n, pos, 3, H, d_head].

    The residual is projected for every reader at once (one wide product) and only the patches
    are projected reader by reader (_project)."""
    kb, n, p, d = x.shape
    H, dh = bm.n_heads, bm.d_head
    out = torch.addmm(bm.b_qkv[layer].view(-1), x.reshape(-1, d), bm.W_cat[layer]).view(kb, n, p, 3 * H, dh)
    if pk is not None:
        P = x.new_zeros(kb * 3 * H, dh, n * p)  # added into: a set may patch a reader twice
        if pk.rows is None:
            P.index_add_(0, pk.dst, _project(bm, layer, pk.dst, _gathered(pk, D, n * p * d).view(-1, n * p, d)))
        else:
            sums = torch.bmm(pk.rows, D[:, :pk.rows.shape[2]]).view(-1, n * p, d)  # [k·u, n·pos, d]
            P.index_add_(0, pk.dst, _project(bm, layer, pk.dst, sums))
            if pk.more is not None:
                P.index_add_(0, pk.more, _project(bm, layer, pk.more, sums.index_select(0, pk.src)))
        out += P.view(kb, 3 * H, dh, n, p).permute(0, 3, 4, 1, 2)
    out = out.view(kb, n, p, 3, H, dh)
    if offset is not None:  # [k, n, pos, 3, H, d_head]: the same layout
        out += offset
    return out.permute(0, 1, 3, 4, 2, 5)


ENTRIES = ("run",)
"""The functions that run a written-out pass (benchmarks wrap them to count its rows and blocks)."""

def _packed(p: Patches, key: GroupKey, readers: int) -> Packed | None:
    """A group's Packed patches: the caller's, or its weights packed block by block."""
    if key in p.packed:
        return p.packed[key]
    w = p.weights.get(key)
    return None if w is None else pack([compact(wb) for wb in w], readers)


def _sum(p: Patches, key: GroupKey, D: torch.Tensor) -> torch.Tensor | None:
    """A residual reader's patches [k, n·pos·d] (None: nothing patched into it). One reader per
    block: its weight rows as they are ([k, 1, writers]) unless packed for gathering."""
    pk = p.packed.get(key)
    if pk is not None and pk.rows is None:
        k, nd = D.shape[0], D.shape[2]
        return D.new_zeros(k, nd).index_add_(0, pk.dst, _gathered(pk, D, nd))
    w = p.weights.get(key)
    if w is None:
        return None
    return torch.bmm(w, D[:, :w.shape[2]])


def run(bm: BareModel, p: Patches, k: int, allowed: KeyMask) -> torch.Tensor:
    """Logits [k·n, pos, d_vocab_out] of k row blocks patched as `p` says, from block p.start."""
    n, pos, d = p.resid.shape
    H, per = bm.n_heads, bm.n_heads + 1
    x = p.resid.unsqueeze(0).expand(k, n, pos, d).contiguous()
    S = (bm.n_layers - p.start) * per
    D = x.new_empty(k, S, n * pos * d)  # reference - current of each live writer, filled as it runs
    ref = p.reference.view(1, S, n * pos * d)
    for layer in range(p.start, bm.n_layers):
        j = (layer - p.start) * per
        q, kk, v = qkv(bm, layer, x, D, _packed(p, ("a", layer), 3 * H), p.qkv_offsets.get(layer)).unbind(2)
        z = attention(bm, q, kk, v, allowed)
        x = x + _heads(bm, layer, z, ref[0, j:j + H], D[:, j:j + H]).view(k, n, pos, d)
        m_in = _input(p, ("m", layer), x, D)
        out = torch.addmm(bm.b_out[layer], bm.act(torch.addmm(bm.b_in[layer], m_in.view(-1, d), bm.W_in[layer])),
                          bm.W_out[layer])
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
