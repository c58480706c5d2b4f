"""The hooks of one eval.patching.hooks pass: which hook points an Adapter.run needs and what each does
(node patches, edge patches as per-reader deltas, reads, start states). Private to eval.patching.hooks (split
off to keep each module readable); the edge-patch deltas themselves are summed in eval.patching.edge_groups."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from eval.core.circuit import INPUT, LOGITS, head_node, mlp_node, parse_node
from eval.patching.edge_groups import QKV, Chunk, Group, GroupWeights, Offsets, Weight, given_groups, keyed_groups, order


SUMMED_HEADS = 32
"""Heads a layer from which a pass without gradients sums them from z (Plan._sum_from_z), not from every
head's output [batch, pos, H, d_model] (planted large-circuit's 99: docs/methods.md); narrower layers
(every earlier model: at most 12) keep the per-head sum bit for bit."""


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


@dataclasses.dataclass(kw_only=True)
class Plan:
    """The hooks of one Adapter.run and the activations they collect (lives for one pass)."""

    a: Any
    """The eval.patching.hooks.Adapter running the pass."""
    reference: Mapping[str, torch.Tensor]
    patch: dict[str, Weight]
    """Writer -> weight of its node patch."""
    attn_groups: dict[int, Group]
    """Layer -> edges into its heads' q/k/v (readers ordered q0..q{H-1}, k0.., v0..)."""
    mlp_groups: dict[int, Group]
    logits_group: Group | None
    read_out: tuple[str, ...]
    read_in: tuple[str, ...]
    grad: bool
    start: Start | None
    """Where the pass begins (None: at the embedding); no hooks before start.layer."""
    offsets: Offsets = dataclasses.field(default_factory=Offsets)
    """Fixed changes added to readers' inputs (eval.patching.edge_groups.Offsets)."""
    keep_resid: bool = False
    """Record every block's resid_pre (Adapter.starts)."""
    out: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    inp: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    resid_pre: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    attn_delta: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = dataclasses.field(default_factory=dict)
    """Layer -> the edge patches' Δ into its heads' inputs [G, 3H, batch // G, pos, d_model] (None where
    only its projection is made: Group.projected) and that Δ through W_Q, W_K, W_V [batch, pos, 3, H, d_head]."""
    chunk_sources: dict[Chunk, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Chunk -> the writers of that chunk some group patches, forward order."""
    diffs: dict[tuple[Chunk, int], torch.Tensor] = dataclasses.field(default_factory=dict)
    """(chunk, row blocks) -> its writers' reference - current (Plan.diff)."""
    head_sums: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    """Layer -> its heads' sum [batch, pos, d_model], node patches in, from z (SUMMED_HEADS; hook_attn_out's)."""

    @classmethod
    def make(cls, a: Any, reference: Mapping[str, torch.Tensor], nodes: Mapping[str, Weight],
             edges: Mapping[tuple[str, str], Weight], read_outputs: Iterable[str], read_inputs: Iterable[str],
             *, batch: int, grad: bool, start: Start | None,
             edge_matrix: tuple[tuple[tuple[str, str], ...], torch.Tensor] | None = None,
             groups: GroupWeights | None = None, offsets: Offsets | None = None) -> Plan:
        read_out = tuple(dict.fromkeys(read_outputs))
        read_in = tuple(dict.fromkeys(read_inputs))
        first = 0 if start is None else start.layer
        if not 0 <= first < a.n_layers:
            raise ValueError(f"a pass starts at a block 0..{a.n_layers - 1}, not {first}")
        matrix, keys = None, ()
        if edge_matrix is not None:
            keys, matrix = edge_matrix
            if matrix.dim() != 2 or matrix.shape[1] != len(keys) or batch % max(1, matrix.shape[0]):
                raise ValueError(f"edge_matrix weights must be [a divisor of {batch}, {len(keys)}], "
                                 f"got {list(matrix.shape)}")
        dst_names = _checked_names(a, read_out, read_in, nodes, edges, keys, first, start)
        by_reader, by_col = _readers(a, edges, keys, dst_names)
        if groups is not None:
            if edges or edge_matrix is not None:
                raise ValueError("give edge patches as edges and edge_matrix, or as groups, not both")
            attn_groups, mlp_groups, logits_group, chunk_sources = given_groups(a, groups, batch, first)
            senders = {s for names in chunk_sources.values() for s in names}
        else:
            attn_groups, mlp_groups, logits_group, chunk_sources = keyed_groups(a, by_reader, by_col, batch,
                                                                                  matrix)
            senders = {s for by in (by_reader, by_col) for srcs in by.values() for s in srcs}
        missing = sorted({*nodes, *senders} - set(reference))
        if missing:
            raise ValueError(f"no reference value for {', '.join(missing)}")
        plan = cls(a=a, reference=reference, patch={n: _row_weight(w, batch) for n, w in nodes.items()},
                   attn_groups=attn_groups, mlp_groups=mlp_groups, logits_group=logits_group,
                   read_out=read_out, read_in=read_in, grad=grad, start=start, chunk_sources=chunk_sources,
                   offsets=_checked_offsets(offsets or Offsets(), a, batch, first, read_in))
        if start is not None:  # writers before the start keep the values the pass started from
            needed = {*read_out, *senders}
            early = [w for w in needed if order(w)[0] < first]
            missing = [w for w in early if w not in start.outputs]
            if missing:
                raise ValueError(f"the start state has no output for {', '.join(sorted(missing))}")
            plan.out.update({w: repeat_to(start.outputs[w], batch) for w in early})
        return plan

    def hooks(self) -> list[tuple[str, Any]]:
        """(hook name, function) pairs, only where this pass needs one."""
        a, H = self.a, self.a.n_heads
        needed = self._needed()
        read_qkv = {parse_node(r).layer for r in self.read_in if parse_node(r).kind == "head"}
        hooks: list[tuple[str, Any]] = []
        first = 0 if self.start is None else self.start.layer
        for layer in range(first, a.n_layers):  # blocks before the start do not run
            if (layer == 0 and INPUT in needed and self.start is None) or layer in read_qkv or self.keep_resid:
                hooks.append((f"blocks.{layer}.hook_resid_pre", self._resid_pre_hook(layer)))
            if layer in self.attn_groups or layer in read_qkv or layer in self.offsets.qkv:
                hooks += [(f"blocks.{layer}.attn.hook_{x}", self._qkv_hook(layer, i)) for i, x in enumerate(QKV)]
            heads = [head_node(layer, h) for h in range(H)]
            if any(h in needed for h in heads):
                hooks.append((f"blocks.{layer}.attn.hook_z", self._z_hook(layer)))
                # Patched (or differentiated) head outputs must be what the model sums.
                if any(h in self.patch or (self.grad and h in self.read_out) for h in heads):
                    hooks.append((f"blocks.{layer}.hook_attn_out", self._attn_out_hook(layer)))
            if layer in self.mlp_groups or mlp_node(layer) in self.read_in or mlp_node(layer) in self.offsets.resid:
                hooks.append((a._mlp_in(layer), self._reader_hook(mlp_node(layer), self.mlp_groups.get(layer))))
            if mlp_node(layer) in needed:
                hooks.append((f"blocks.{layer}.hook_mlp_out", self._writer_hook(mlp_node(layer))))
        if self.logits_group is not None or LOGITS in self.read_in or LOGITS in self.offsets.resid:
            hooks.append((f"blocks.{a.n_layers - 1}.hook_resid_post", self._reader_hook(LOGITS, self.logits_group)))
        return hooks

    def _needed(self) -> set[str]:
        """The writers whose outputs the pass patches, reads or sends along a patched edge (a chunk stacks
        all its writers: Plan.diff)."""
        groups = (*self.attn_groups.values(), *self.mlp_groups.values(), self.logits_group)
        return {*self.read_out, *self.patch, *(s for g in groups if g is not None for s in g.sources),
                *(s for names in self.chunk_sources.values() for s in names)}

    def diff(self, chunk: Chunk, G: int) -> torch.Tensor:
        """[G, writers, (batch // G)·pos·d_model]: reference - current output of the chunk's patched
        writers by row block, made on first use (every writer of a chunk is out by then) and kept
        for the pass. Laid out as the row blocks' products read it, so that neither they nor their
        gradients need a transposed copy."""
        if (chunk, G) not in self.diffs:
            writers = self.chunk_sources[chunk]
            b = int(self.out[writers[0]].shape[0])
            if (torch.is_grad_enabled() and any(self.out[w].requires_grad for w in writers)) or \
                    any(int(self.reference[w].shape[0]) not in (1, b // G, b) for w in writers):
                D = torch.stack([_minus(self.reference[w], self.out[w]).reshape(G, -1) for w in writers], dim=1)
            else:  # subtracted straight into the stack: no copy of every difference
                D = torch.empty(G, len(writers), self.out[writers[0]][0].numel() * b // G,
                                dtype=self.out[writers[0]].dtype, device=self.out[writers[0]].device)
                for i, w in enumerate(writers):
                    ref, rows = self.reference[w], int(self.reference[w].shape[0])
                    lead = (G, b // G) if rows == b else (1, rows)  # 1 or b // G rows: every block's
                    torch.sub(ref.reshape(*lead, -1), self.out[w].reshape(G, b // G, -1),
                              out=D[:, i].view(G, b // G, -1))
            self.diffs[(chunk, G)] = D
        return self.diffs[(chunk, G)]

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
            W_O = self.a.attn["W_O"][layer].to(z.dtype)  # [H, d_head, d_model]
            if not self.grad and self.a.n_heads >= SUMMED_HEADS:
                return self._sum_from_z(layer, z, W_O)
            result = torch.einsum("bphk,hkd->bphd", z, W_O)
            # unbind: one stacked gradient backwards, not a zero-filled [batch, pos, H, d] per head
            for h, out in enumerate(result.unbind(dim=2)):
                self._set_out(head_node(layer, h), out)
            return z
        return hook

    def _sum_from_z(self, layer: int, z: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
        """A wide layer without gradients: z [batch, pos, H, d_head] through W_O in one product, plus each
        patched head's change; only heads the pass patches or reads get their own output. Returns z."""
        (b, p), needed = z.shape[:2], self._needed()
        total = z.reshape(b, p, -1) @ W_O.reshape(-1, W_O.shape[-1])
        for h in (h for h in range(self.a.n_heads) if head_node(layer, h) in needed):
            own = z[:, :, h] @ W_O[h]
            out = self._set_out(head_node(layer, h), own)
            total = total + (out - own) if head_node(layer, h) in self.patch else total
        self.head_sums[layer] = total
        return z

    def _attn_out_hook(self, layer: int):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            summed = self.head_sums.get(layer)
            if summed is None:
                summed = torch.stack([self.out[head_node(layer, h)] for h in range(self.a.n_heads)], dim=2).sum(dim=2)
            return summed + self.a.attn["b_O"][layer].to(act.dtype)
        return hook

    def _qkv_hook(self, layer: int, index: int):
        x, H = QKV[index], self.a.n_heads
        W = self.a.attn[f"W_{x.upper()}"][layer]
        b = self.a.attn[f"b_{x.upper()}"][layer]

        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:  # act: [batch, pos, H, d_head]
            group = self.attn_groups.get(layer)
            if group is not None and layer not in self.attn_delta:  # q, k, v share one Δ per layer
                W_qkv = torch.cat([self.a.attn[f"W_{y.upper()}"][layer] for y in QKV]).to(act.dtype)  # [3H, d, k]
                G = int(group.weights.shape[0])
                q, p = act.shape[0] // G, act.shape[1]
                if group.one_sender() and not any(head_node(layer, h, y) in self.read_in for h in range(H) for y in QKV):
                    delta, proj = None, group.projected(self, W_qkv)  # no input read: Δ itself is never needed
                else:
                    delta = group.delta(self)  # [G, 3H readers, batch // G, pos, d_model]
                    # Projected for q, k and v at once, then sliced (a slice's gradient is zero-filled at the
                    # sliced one's size: d_head, not d_model); a batched matmul reads Δ in place, an einsum permutes it
                    proj = torch.matmul(delta.view(G, 3 * H, q * p, -1), W_qkv)  # [G, 3H, q·pos, d_head]
                proj = proj.reshape(G, 3, H, q, p, proj.shape[-1]).permute(0, 3, 4, 1, 2, 5).reshape(
                    *act.shape[:2], 3, *act.shape[2:])
                self.attn_delta[layer] = (delta, proj)
            delta, proj = self.attn_delta[layer] if group is not None else (None, None)
            reads = [h for h in range(H) if head_node(layer, h, x) in self.read_in]
            if proj is not None:
                act = act + proj[:, :, index]
            if layer in self.offsets.qkv:
                act = act + self.offsets.qkv[layer][:, :, index]
            if reads:
                pre = self.resid_pre[layer]
                if self.grad:
                    act = act.clone()
                for h in reads:
                    inp = pre + delta[:, index * H + h].reshape(pre.shape) if delta is not None else pre
                    if self.grad:
                        # Recomputed from the read input, so the input's .grad is the head's own.
                        inp = _keep_grad(inp.clone() if inp is pre else inp)
                        act[:, :, h] = inp @ W[h].to(act.dtype) + b[h].to(act.dtype)
                    self.inp[head_node(layer, h, x)] = inp
            return act
        return hook

    def _reader_hook(self, reader: str, group: Group | None):
        def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
            if group is not None:
                act = act + group.delta(self).reshape(act.shape)  # one reader: [G, 1, ...] is [batch, ...]
            if reader in self.offsets.resid:
                act = act + self.offsets.resid[reader]
            if reader in self.read_in:
                if self.grad:
                    # A copy of its own: on the 4.x bridge the MLP's input hook holds the residual
                    # stream's own tensor, whose .grad would add the residual path's.
                    act = _keep_grad(act.clone() if group is None else act)
                self.inp[reader] = act
            return act
        return hook


def _minus(reference: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """reference - current [batch, ...]; a reference of fewer rows (a divisor of batch) stands for
    its copies one block after another, and is not repeated in memory (ACDC's row blocks)."""
    r, b = int(reference.shape[0]), int(current.shape[0])
    if r in (1, b):
        return reference - current
    if b % r:
        raise ValueError(f"a reference of {r} rows cannot fill a batch of {b}")
    return (reference - current.view(b // r, *reference.shape)).view(current.shape)


def _checked_offsets(offsets: Offsets, a: Any, batch: int, first: int, read_in: tuple[str, ...]) -> Offsets:
    """The offsets, refused where they come before the start, have the wrong shape, or would make a
    read head input disagree with the head's own (a read input is the unprojected sum)."""
    for layer, off in offsets.qkv.items():
        if not first <= layer < a.n_layers or off.dim() != 5 or off.shape[0] != batch or off.shape[2:4] != (3, a.n_heads):
            raise ValueError(f"a q/k/v offset of layer {layer} must be [{batch}, pos, 3, {a.n_heads}, d_head] "
                             f"at a block from {first} on, got {list(off.shape)}")
        if any(parse_node(r).kind == "head" and parse_node(r).layer == layer for r in read_in):
            raise ValueError(f"layer {layer}'s heads cannot have both a q/k/v offset and read inputs")
    for reader, off in offsets.resid.items():
        n = parse_node(reader)
        if n.kind not in ("mlp", "logits") or (n.kind == "mlp" and not first <= n.layer < a.n_layers) \
                or off.dim() != 3 or off.shape[0] != batch:
            raise ValueError(f"an offset of {reader} must be [{batch}, pos, d_model] for an MLP from block "
                             f"{first} on or the logits, got {list(off.shape)}")
    return offsets


def _keep_grad(act: torch.Tensor) -> torch.Tensor:
    """`act`, keeping its .grad after backward (a fresh leaf if nothing upstream needs one)."""
    if not act.requires_grad:
        return act.detach().requires_grad_(True)
    act.retain_grad()
    return act


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


def _checked_names(a: Any, read_out: tuple[str, ...], read_in: tuple[str, ...], nodes: Mapping[str, Weight],
                   edges: Mapping[tuple[str, str], Weight], keys: tuple[tuple[str, str], ...], first: int,
                   start: Start | None) -> tuple[str, ...]:
    """Every name a plan touches is a hook point of this model at or after the pass's first block;
    returns the edge readers as named."""
    # Validated per distinct name, not per edge: ACDC and edge SP pass 10^4 edges every pass.
    # (Nor is an object kept per edge: the garbage collector's passes over them cost more than
    # the rest of the plan.)
    dst_names = tuple(dict.fromkeys(d for _, d in (*edges, *keys)))
    early_in = [r for r in (*read_in, *dst_names) if _reader_layer(r, a.n_layers) < first]
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
    return dst_names


def _readers(a: Any, edges: Mapping[tuple[str, str], Weight], keys: tuple[tuple[str, str], ...],
             dst_names: tuple[str, ...]) -> tuple[dict[str, dict[str, Weight]], dict[str, dict[str, int]]]:
    """Edge patches by reader input (a head's q, k and v each): reader -> sender -> weight, and
    reader -> sender -> its column of the edge matrix; an edge whose sender does not feed its
    reader is refused."""
    src_at = {}  # writer -> (layer, the input's -1; kind)
    for src in dict.fromkeys(s for s, _ in (*edges, *keys)):
        a.output_point(src)
        n = parse_node(src)
        src_at[src] = (-1 if n.kind == "input" else n.layer, n.kind)
    expand: dict[str, list[tuple[str, int, str]]] = {}  # reader as named -> (reader, layer, kind)
    for dst in dst_names:
        d = a._node(dst)
        dsts = [head_node(d.layer, d.head, x) for x in QKV] if d.kind == "head" and d.qkv is None else [dst]
        for r in dsts:
            a.input_point(r)
        expand[dst] = [(r, _reader_layer(r, a.n_layers), d.kind) for r in dsts]

    def readers_of(src: str, dst: str) -> list[tuple[str, int, str]]:
        s_layer, s_kind = src_at[src]
        for r, r_layer, r_kind in expand[dst]:
            # Earlier layers (and the input) feed every reader; an MLP also reads its own layer's heads.
            if not (s_layer < r_layer or (r_kind == "mlp" and s_layer == r_layer and s_kind == "head")):
                raise ValueError(f"edge {src}->{dst}: {src} does not feed {dst}")
        return expand[dst]

    by_reader: dict[str, dict[str, Weight]] = {}  # reader -> sender -> weight
    for (src, dst), w in edges.items():
        for r, _, _ in readers_of(src, dst):
            by_reader.setdefault(r, {})[src] = w
    by_col: dict[str, dict[str, int]] = {}  # reader -> sender -> its column of edge_matrix
    for j, (src, dst) in enumerate(keys):
        for r, _, _ in readers_of(src, dst):
            by_col.setdefault(r, {})[src] = j
    return by_reader, by_col
