"""The hooks of one eval.hooks pass: which hook points an Adapter.run needs and what each does
(node patches, edge patches as per-reader deltas, reads, start states). Private to eval.hooks,
split off to keep each module readable; nothing else imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from eval.circuit import INPUT, LOGITS, head_node, mlp_node, parse_node

Weight = float | torch.Tensor
"""How far a patched value moves towards the reference: 1 replaces it, 0 leaves it; a float, or
a [batch] tensor with one weight per row."""
QKV = ("q", "k", "v")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Start:
    """A pass's state where block `layer` begins: a later pass that changes nothing before that
    block can start there instead of at the embedding (the patched-forward cost then scales with
    the layers left, not all of them)."""

    layer: int
    """The block the pass starts at, 0 <= layer < n_layers."""
    resid: torch.Tensor
    """`blocks.{layer}.hook_resid_pre` [rows, pos, d_model]."""
    outputs: Mapping[str, torch.Tensor]
    """Every writer before block `layer` (`input` included) -> its output [rows, pos, d_model] as
    its readers saw it. A pass of batch k·rows repeats these (and resid) k times, block-wise."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Group:
    """The edge patches into one set of readers: Δ = Σ_s W[r, s] (reference_s - current_s)."""

    sources: tuple[str, ...]
    """Writers with a patched edge into some reader of the group, forward order."""
    weights: torch.Tensor
    """[G, readers, sources], G = 1 (every row), batch (per row) or a divisor of batch (per row
    block: G blocks of batch // G consecutive rows, as ACDC and SP stack their τ or λ)."""

    def delta(self, plan: Plan) -> torch.Tensor:
        """[batch, pos, readers, d_model]."""
        diff = torch.stack([plan.reference[s] - plan.out[s] for s in self.sources], dim=2)  # [b, p, s, d]
        G = int(self.weights.shape[0])
        if G == 1:
            return torch.einsum("rs,bpsd->bprd", self.weights[0], diff)
        b, p, s, d = diff.shape
        if s <= 4:  # few senders (edge patching's passes): einsum per row is fastest on CPU
            return torch.einsum("brs,bpsd->bprd", self.weights.repeat_interleave(b // G, dim=0), diff)
        # Many senders (ACDC, edge SP): a batched matmul, [readers, sources] x [sources, d_model] per
        # row and position, ~1.7-2.7x faster on CPU than the einsum, which permutes diff first.
        out = torch.matmul(self.weights.unsqueeze(1), diff.reshape(G, (b // G) * p, s, d))  # [G, q, r, d]
        return out.reshape(b, p, -1, d)


@dataclasses.dataclass(kw_only=True)
class Plan:
    """The hooks of one Adapter.run and the activations they collect (lives for one pass)."""

    a: Any
    """The eval.hooks.Adapter running the pass."""
    reference: Mapping[str, torch.Tensor]
    patch: dict[str, Weight]
    """Writer -> weight of its node patch."""
    attn_groups: dict[int, _Group]
    """Layer -> edges into its heads' q/k/v (readers ordered q0..q{H-1}, k0.., v0..)."""
    mlp_groups: dict[int, _Group]
    logits_group: _Group | None
    read_out: tuple[str, ...]
    read_in: tuple[str, ...]
    grad: bool
    start: Start | None
    """Where the pass begins (None: at the embedding); no hooks before start.layer."""
    keep_resid: bool = False
    """Record every block's resid_pre (Adapter.starts)."""
    out: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    inp: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    resid_pre: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    attn_delta: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)

    @classmethod
    def make(cls, a: Any, reference: Mapping[str, torch.Tensor], nodes: Mapping[str, Weight],
             edges: Mapping[tuple[str, str], Weight], read_outputs: Iterable[str], read_inputs: Iterable[str],
             *, batch: int, grad: bool, start: Start | None,
             edge_matrix: tuple[tuple[tuple[str, str], ...], torch.Tensor] | None = None) -> Plan:
        read_out = tuple(dict.fromkeys(read_outputs))
        read_in = tuple(dict.fromkeys(read_inputs))
        first = 0 if start is None else start.layer
        if not 0 <= first < a.n_layers:
            raise ValueError(f"a pass starts at a block 0..{a.n_layers - 1}, not {first}")
        matrix = None
        if edge_matrix is not None:
            keys, matrix = edge_matrix
            if matrix.dim() != 2 or matrix.shape[1] != len(keys) or batch % max(1, matrix.shape[0]):
                raise ValueError(f"edge_matrix weights must be [a divisor of {batch}, {len(keys)}], "
                                 f"got {list(matrix.shape)}")
            edges = {**edges, **{tuple(e): _Col(j) for j, e in enumerate(keys)}}
        early_in = [r for r in (*read_in, *(d for _, d in edges)) if _reader_layer(r, a.n_layers) < first]
        early_patch = [w for w in nodes if start is not None and order(w)[0] < first]
        if early_in or early_patch:
            raise ValueError(f"a pass starting at block {first} cannot patch or read "
                             f"{', '.join(sorted({*early_in, *early_patch}))}: they come before it")
        for name in read_out:
            a.output_point(name)  # validates: a writer of this model
        for name in read_in:
            a.input_point(name)
        for name in nodes:
            a.output_point(name)
        by_reader: dict[str, dict[str, Weight]] = {}
        for (src, dst), w in edges.items():
            a.output_point(src)
            d = a._node(dst)
            dsts = [head_node(d.layer, d.head, x) for x in QKV] if d.kind == "head" and d.qkv is None else [dst]
            for r in dsts:
                a.input_point(r)
                if not _precedes(src, r):
                    raise ValueError(f"edge {src}->{dst}: {src} does not feed {dst}")
                by_reader.setdefault(r, {})[src] = w
        missing = sorted({*nodes, *(s for srcs in by_reader.values() for s in srcs)} - set(reference))
        if missing:
            raise ValueError(f"no reference value for {', '.join(missing)}")
        H = a.n_heads
        attn_groups, mlp_groups = {}, {}
        for layer in range(a.n_layers):
            readers = [head_node(layer, h, x) for x in QKV for h in range(H)]
            if any(r in by_reader for r in readers):
                attn_groups[layer] = _group(readers, by_reader, batch, matrix)
            if mlp_node(layer) in by_reader:
                mlp_groups[layer] = _group([mlp_node(layer)], by_reader, batch, matrix)
        logits_group = _group([LOGITS], by_reader, batch, matrix) if LOGITS in by_reader else None
        plan = cls(a=a, reference=reference, patch={n: _row_weight(w, batch) for n, w in nodes.items()},
                   attn_groups=attn_groups, mlp_groups=mlp_groups, logits_group=logits_group,
                   read_out=read_out, read_in=read_in, grad=grad, start=start)
        if start is not None:  # writers before the start keep the values the pass started from
            needed = {*read_out, *(s for srcs in by_reader.values() for s in srcs)}
            early = [w for w in needed if order(w)[0] < first]
            missing = [w for w in early if w not in start.outputs]
            if missing:
                raise ValueError(f"the start state has no output for {', '.join(sorted(missing))}")
            plan.out.update({w: repeat_to(start.outputs[w], batch) for w in early})
        return plan

    def hooks(self) -> list[tuple[str, Any]]:
        """(hook name, function) pairs, only where this pass needs one."""
        a, H = self.a, self.a.n_heads
        needed = {*self.read_out, *self.patch}
        for group in (*self.attn_groups.values(), *self.mlp_groups.values(), self.logits_group):
            if group is not None:
                needed.update(group.sources)
        read_qkv = {parse_node(r).layer for r in self.read_in if parse_node(r).kind == "head"}
        hooks: list[tuple[str, Any]] = []
        first = 0 if self.start is None else self.start.layer
        for layer in range(first, a.n_layers):  # blocks before the start do not run
            if (layer == 0 and INPUT in needed and self.start is None) or layer in read_qkv or self.keep_resid:
                hooks.append((f"blocks.{layer}.hook_resid_pre", self._resid_pre_hook(layer)))
            if layer in self.attn_groups or layer in read_qkv:
                hooks += [(f"blocks.{layer}.attn.hook_{x}", self._qkv_hook(layer, i)) for i, x in enumerate(QKV)]
            heads = [head_node(layer, h) for h in range(H)]
            if any(h in needed for h in heads):
                hooks.append((f"blocks.{layer}.attn.hook_z", self._z_hook(layer)))
                # Patched (or differentiated) head outputs must be what the model sums.
                if any(h in self.patch or (self.grad and h in self.read_out) for h in heads):
                    hooks.append((f"blocks.{layer}.hook_attn_out", self._attn_out_hook(layer)))
            if layer in self.mlp_groups or mlp_node(layer) in self.read_in:
                hooks.append((a._mlp_in(layer), self._reader_hook(mlp_node(layer), self.mlp_groups.get(layer))))
            if mlp_node(layer) in needed:
                hooks.append((f"blocks.{layer}.hook_mlp_out", self._writer_hook(mlp_node(layer))))
        if self.logits_group is not None or LOGITS in self.read_in:
            hooks.append((f"blocks.{a.n_layers - 1}.hook_resid_post", self._reader_hook(LOGITS, self.logits_group)))
        return hooks

    def _set_out(self, node: str, act: torch.Tensor) -> torch.Tensor:
        if node in self.patch:
            act = torch.lerp(act, self.reference[node].to(act.dtype), self.patch[node])
        if self.grad and node in self.read_out:
            act = _keep_grad(act)
        self.out[node] = act
        return act

    def _writer_hook(self, node: str):
        return lambda act, hook: self._set_out(node, act)

    def _resid_pre_hook(self, layer: int):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            if layer == 0 and self.start is None:  # with a start, `input` is start.outputs'
                act = self._set_out(INPUT, act)
            self.resid_pre[layer] = act
            return act
        return hook

    def _z_hook(self, layer: int):
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            result = torch.einsum("bphk,hkd->bphd", z, self.a.attn["W_O"][layer].to(z.dtype))
            for h in range(self.a.n_heads):
                self._set_out(head_node(layer, h), result[:, :, h])
            return z
        return hook

    def _attn_out_hook(self, layer: int):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            heads = [self.out[head_node(layer, h)] for h in range(self.a.n_heads)]
            return torch.stack(heads, dim=2).sum(dim=2) + self.a.attn["b_O"][layer].to(act.dtype)
        return hook

    def _qkv_hook(self, layer: int, index: int):
        x, H = QKV[index], self.a.n_heads
        W = self.a.attn[f"W_{x.upper()}"][layer]
        b = self.a.attn[f"b_{x.upper()}"][layer]

        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:  # act: [batch, pos, H, d_head]
            group = self.attn_groups.get(layer)
            if group is not None and layer not in self.attn_delta:  # q, k, v share one Δ per layer
                self.attn_delta[layer] = group.delta(self)
            delta = self.attn_delta[layer][:, :, index * H:(index + 1) * H] if group is not None else None
            reads = [h for h in range(H) if head_node(layer, h, x) in self.read_in]
            if delta is not None:
                act = act + torch.einsum("bphd,hdk->bphk", delta, W.to(act.dtype))
            if reads:
                pre = self.resid_pre[layer]
                if self.grad:
                    act = act.clone()
                for h in reads:
                    inp = pre + delta[:, :, h] if delta is not None else pre
                    if self.grad:
                        # Recomputed from the read input, so the input's .grad is the head's own.
                        inp = _keep_grad(inp.clone() if inp is pre else inp)
                        act[:, :, h] = inp @ W[h].to(act.dtype) + b[h].to(act.dtype)
                    self.inp[head_node(layer, h, x)] = inp
            return act
        return hook

    def _reader_hook(self, reader: str, group: _Group | None):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            if group is not None:
                act = act + group.delta(self)[:, :, 0]
            if reader in self.read_in:
                if self.grad:
                    # A copy of its own: on the 4.x bridge the MLP's input hook holds the residual
                    # stream's own tensor, whose .grad would add the residual path's.
                    act = _keep_grad(act.clone() if group is None else act)
                self.inp[reader] = act
            return act
        return hook


def _keep_grad(act: torch.Tensor) -> torch.Tensor:
    """`act`, keeping its .grad after backward (a fresh leaf if nothing upstream needs one)."""
    if not act.requires_grad:
        return act.detach().requires_grad_(True)
    act.retain_grad()
    return act


@dataclasses.dataclass(frozen=True)
class _Col:
    """An edge weight that is column j of Adapter.run's edge_matrix."""

    j: int


def _group(readers: list[str], by_reader: Mapping[str, Mapping[str, Weight | _Col]], batch: int,
           matrix: torch.Tensor | None) -> _Group:
    sources = sorted({s for r in readers for s in by_reader.get(r, {})}, key=order)
    col = {s: i for i, s in enumerate(sources)}
    entries = [(i, col[s], w) for i, r in enumerate(readers) for s, w in by_reader.get(r, {}).items()]
    from_matrix = [(i * len(sources) + c, w.j) for i, c, w in entries if isinstance(w, _Col)]
    per_row = any(isinstance(w, torch.Tensor) and w.dim() > 0 for _, _, w in entries)
    G = batch if per_row else int(matrix.shape[0]) if from_matrix and matrix is not None else 1
    weights = torch.zeros(G, len(readers), len(sources))
    for i, c, w in entries:
        if not isinstance(w, _Col):
            weights[:, i, c] = w
    if from_matrix:  # one gather (and, backwards, one scatter) for every matrix weight of the group
        assert matrix is not None
        flat, cols = (torch.tensor(x) for x in zip(*from_matrix))
        picked = matrix[:, cols].to(weights.dtype)  # [blocks, entries]
        if G != picked.shape[0]:  # per-row weights beside block weights: every row its own
            picked = picked.repeat_interleave(G // picked.shape[0], dim=0)
        weights = weights.flatten(1).index_copy(1, flat, picked).view_as(weights)
    return _Group(sources=tuple(sources), weights=weights)


def repeat_to(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[rows, ...] -> [batch, ...], batch // rows copies one block after another (as row blocks
    are stacked); unchanged when rows == batch."""
    rows = int(x.shape[0])
    if rows == batch:
        return x
    if batch % rows:
        raise ValueError(f"a start state of {rows} rows cannot fill a batch of {batch}")
    return x.repeat(batch // rows, *([1] * (x.dim() - 1)))


def _reader_layer(reader: str, n_layers: int) -> int:
    """The block a reader's input is read in (logits: after the last, n_layers)."""
    n = parse_node(reader)
    return n_layers if n.kind == "logits" else n.layer


def _row_weight(w: Weight, batch: int) -> Weight:
    """A node weight shaped for torch.lerp over [batch, pos, d_model]."""
    if isinstance(w, torch.Tensor) and w.dim() > 0:
        if w.shape != (batch,):
            raise ValueError(f"a per-row weight must have shape [{batch}], got {list(w.shape)}")
        return w.reshape(batch, 1, 1).float()
    return float(w)


def order(node: str) -> tuple[int, int]:
    n = parse_node(node)
    if n.kind == "input":
        return (-1, 0)
    return (n.layer, n.head if n.kind == "head" else 1 << 30)


def _precedes(src: str, reader: str) -> bool:
    """Whether writer `src` feeds `reader`: earlier layers always; an MLP also reads its own
    layer's heads; logits read everything."""
    s, r = parse_node(src), parse_node(reader)
    if r.kind == "logits" or s.kind == "input":
        return True
    if r.kind == "mlp":
        return s.layer < r.layer or (s.layer == r.layer and s.kind == "head")
    return s.layer < r.layer
