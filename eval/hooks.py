"""Node names -> TransformerLens hook points, and the interventions every method runs through.

The one module that knows where a node (eval.circuit names) lives in a model, for
transformer-lens 3.x (HookedTransformer) and 4.x (TransformerBridge) alike:

| node           | its output (a writer)                         | its input (a reader)                      |
| -------------- | --------------------------------------------- | ----------------------------------------- |
| `input`        | `blocks.0.hook_resid_pre` (token + position)  |                                           |
| `a{l}.h{h}`    | `blocks.{l}.attn.hook_z[:, :, h] @ W_O[h]`    | its `<q>`, `<k>` and `<v>` inputs         |
| `a{l}.h{h}<q>` |                                               | `blocks.{l}.hook_resid_pre`, patched at   |
|                |                                               | `blocks.{l}.attn.hook_q[:, :, h]`         |
| `m{l}`         | `blocks.{l}.hook_mlp_out`                     | `blocks.{l}.hook_mlp_in` (3.x),           |
|                |                                               | `blocks.{l}.mlp.hook_in` (4.x bridge)     |
| `logits`       |                                               | `blocks.{L-1}.hook_resid_post`            |

Why no `hook_result` / `hook_q_input`: the 4.x bridge has neither (hooking them raises), and its
`hook_mlp_in` is the residual stream itself, not the MLP's own copy. Both are linear images of hooks
every version has: a head's output is z_h W_O[h] (3.x's hook_result exactly: its attention output
is the sum of these plus b_O), and, zoo models having no LayerNorm, a change D of head h's query
input changes its query by D W_Q[h] (likewise keys and values). 4.x's `attn.q.hook_in` is shared by
all heads, so it cannot patch one. One code path therefore serves both majors, equal to 3.x's own
hooks within float rounding (tests/test_tl_hooks.py).

Every call is batched: activations are [batch, pos, d_model], a weight is a float or a per-row
[batch] tensor (so one forward pass can hold a different intervention in every row):

    adapter = adapt(model)
    logits = adapter.forward(tokens, mask)
    cf = adapter.outputs(cf_tokens, cf_mask, ["input", "a0.h1", "m0"])   # node -> output
    run = adapter.run(tokens, mask, reference=cf,
                      nodes={"a0.h1": 1.0},                 # every reader sees cf's a0.h1
                      edges={("m0", "a1.h0<q>"): 1.0},      # only a1.h0's query sees cf's m0
                      read_outputs=["m0"], read_inputs=["logits"], grad=True)
    metric(run.logits).backward(); run.outputs["m0"].grad; run.inputs["logits"].grad

Attention masks are read as TransformerLens 3.x reads them (eval.tlens.run_with_hooks).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from eval import tlens
from eval.circuit import INPUT, LOGITS, head_node, mlp_node, parse_node

Weight = float | torch.Tensor
"""How far a patched value moves towards the reference: 1 replaces it, 0 leaves it; a float, or
a [batch] tensor with one weight per row."""
QKV = ("q", "k", "v")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """What one forward pass through `Adapter.run` gives back."""

    logits: torch.Tensor
    """[batch, pos, d_vocab_out]."""
    outputs: Mapping[str, torch.Tensor]
    """Writer -> its output [batch, pos, d_model] as its readers saw it (after node patches)."""
    inputs: Mapping[str, torch.Tensor]
    """Reader (`a{l}.h{h}<q|k|v>`, `m{l}`, `logits`) -> its input [batch, pos, d_model], after
    edge patches. With grad=True these and `outputs` are in the graph and keep their .grad."""


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
class Adapter:
    """A model plus what its hooks need: sizes, attention weights, the MLP-input hook's name."""

    model: Any
    """transformer_lens HookedTransformer (3.x) or TransformerBridge (either major)."""
    n_layers: int
    """Transformer blocks."""
    n_heads: int
    """Heads per block."""
    attn: Mapping[str, torch.Tensor]
    """W_Q, W_K, W_V [L, H, d_model, d_head], b_Q, b_K, b_V [L, H, d_head], W_O [L, H, d_head,
    d_model], b_O [L, d_model]: detached, read when the adapter was made."""
    mlp_in: str | None
    """Hook name of an MLP's own input, `{l}` for the layer (None: the model has none)."""

    # ---- where nodes live ----

    def output_point(self, node: str) -> str:
        """Hook point a writer's output is read from (a head's: hook_z, times W_O[h])."""
        n = self._node(node)
        if n.kind == "input":
            return "blocks.0.hook_resid_pre"
        if n.kind == "head" and n.qkv is None:
            return f"blocks.{n.layer}.attn.hook_z"
        if n.kind == "mlp":
            return f"blocks.{n.layer}.hook_mlp_out"
        raise ValueError(f"{node!r} writes nothing (writers: input, a<l>.h<h>, m<l>)")

    def input_point(self, reader: str) -> str:
        """Hook point where a reader's input is patched (a head's: hook_q/k/v, through W_Q/K/V)."""
        n = self._node(reader)
        if n.kind == "logits":
            return f"blocks.{self.n_layers - 1}.hook_resid_post"
        if n.kind == "mlp":
            return self._mlp_in(n.layer)
        if n.kind == "head" and n.qkv is not None:
            return f"blocks.{n.layer}.attn.hook_{n.qkv}"
        raise ValueError(f"{reader!r} is not a reader (readers: a<l>.h<h><q|k|v>, m<l>, logits)")

    # ---- running ----

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None, *, grad: bool = False) -> torch.Tensor:
        """Logits, no intervention."""
        with torch.set_grad_enabled(grad), _lean(self.model):
            return tlens.run_with_hooks(self.model, tokens, attention_mask)

    def outputs(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None,
                nodes: Iterable[str]) -> dict[str, torch.Tensor]:
        """Writer -> its output [batch, pos, d_model] on these inputs (no gradient)."""
        return dict(self.run(tokens, attention_mask, read_outputs=nodes).outputs)

    def run(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None, *,
            reference: Mapping[str, torch.Tensor] | None = None,
            nodes: Mapping[str, Weight] | None = None,
            edges: Mapping[tuple[str, str], Weight] | None = None,
            read_outputs: Iterable[str] = (), read_inputs: Iterable[str] = (),
            grad: bool = False, start: Start | None = None,
            edge_matrix: tuple[tuple[tuple[str, str], ...], torch.Tensor] | None = None) -> Run:
        """One forward pass with interventions, reading activations on the way.

        reference: writer -> the value it is patched towards, [batch or 1, pos, d_model].
        nodes: writer -> w: every reader sees the writer's output as (1-w)·own + w·reference.
        edges: (writer, reader) -> w: only that reader sees the writer as (1-w)·current +
          w·reference (MIB's edge patching; current = the writer's output in this pass). A whole
          head `a{l}.h{h}` as reader means its q, k and v inputs.
        read_outputs / read_inputs: writers / readers whose values to return in the Run.
        grad: run with autograd; returned activations keep their .grad after a backward pass.
        edge_matrix: (keys, W [batch, len(keys)]): the same as edges={keys[j]: W[:, j]}, for many
          per-row edge weights at once (ACDC, edge subnetwork probing): one gather per layer instead of
          a slice per edge, forwards and backwards.
        start: begin at block start.layer from this state (`starts`) instead of at the embedding;
          the same logits as the full pass when nothing before that block is patched, which is
          then refused (node patches of earlier writers, edges into earlier readers). Writers
          before it keep start.outputs; tokens still give the batch and the bridge's fallback.
        """
        batch = int(tokens.shape[0])
        plan = _Plan.make(self, reference or {}, nodes or {}, edges or {}, read_outputs, read_inputs,
                          batch=batch, grad=grad, start=start, edge_matrix=edge_matrix)
        resume = None if start is None else (start.layer, _repeat_to(start.resid, batch))
        with torch.set_grad_enabled(grad), _lean(self.model):
            logits = tlens.run_with_hooks(self.model, tokens, attention_mask, plan.hooks(), start=resume)
        return Run(logits=logits, outputs={n: plan.out[n] for n in plan.read_out},
                   inputs={n: plan.inp[n] for n in plan.read_in})

    def starts(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None, *,
               reference: Mapping[str, torch.Tensor] | None = None,
               nodes: Mapping[str, Weight] | None = None) -> tuple[Start, ...]:
        """The state of one pass (no gradient; node patches allowed) at every block, index = layer:
        where later passes that differ from it only from that block on can start."""
        writers = [INPUT, *(head_node(l, h) for l in range(self.n_layers) for h in range(self.n_heads)),
                   *(mlp_node(l) for l in range(self.n_layers))]
        plan = _Plan.make(self, reference or {}, nodes or {}, {}, writers, (), batch=int(tokens.shape[0]),
                          grad=False, start=None)
        plan.keep_resid = True
        with torch.no_grad(), _lean(self.model):
            tlens.run_with_hooks(self.model, tokens, attention_mask, plan.hooks())
        return tuple(Start(layer=l, resid=plan.resid_pre[l],
                           outputs={w: plan.out[w] for w in writers if _order(w)[0] < l})
                     for l in range(self.n_layers))

    # ---- helpers ----

    def _node(self, name: str):
        n = parse_node(name)
        if n.kind in ("head", "mlp") and not (0 <= n.layer < self.n_layers and
                                              (n.kind == "mlp" or 0 <= n.head < self.n_heads)):
            raise ValueError(f"node {name!r} is not in the model ({self.n_layers} layers x {self.n_heads} heads)")
        return n

    def _mlp_in(self, layer: int) -> str:
        if self.mlp_in is None:
            raise ValueError("this HookedTransformer has no MLP-input hook; build it with use_hook_mlp_in=True "
                             "(zoo configs do) or call model.set_use_hook_mlp_in(True)")
        return self.mlp_in.format(l=layer)


def adapt(model: Any) -> Adapter:
    """An Adapter for a HookedTransformer or TransformerBridge without LayerNorm (zoo models)."""
    cfg = model.cfg
    if getattr(cfg, "normalization_type", None) is not None:
        raise ValueError(f"eval.hooks needs a model without LayerNorm (zoo models); got {cfg.normalization_type!r}")
    weights = tlens.state_dict_3x(model)
    L = int(cfg.n_layers)
    attn = {name: torch.stack([weights[f"blocks.{l}.attn.{name}"] for l in range(L)])
            for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
    if tlens.is_bridge(model):
        mlp_in = "blocks.{l}.mlp.hook_in"  # the bridge's blocks.{l}.hook_mlp_in is the residual stream
    else:
        mlp_in = "blocks.{l}.hook_mlp_in" if "blocks.0.hook_mlp_in" in model.hook_dict else None
    return Adapter(model=model, n_layers=L, n_heads=int(cfg.n_heads), attn=attn, mlp_in=mlp_in)


def forward(model: Any, tokens: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Logits of any zoo model (HookedTransformer or TransformerBridge), no gradient, the attention
    mask read as TransformerLens 3.x reads it."""
    with torch.no_grad(), _lean(model):
        return tlens.run_with_hooks(model, tokens, attention_mask)


_HEAVY_SWITCHES = ("use_attn_result", "use_split_qkv_input", "use_attn_in")
"""3.x config switches that add hook_result / hook_q_input-style points, which this module never reads."""


@contextlib.contextmanager
def _lean(model: Any) -> Iterator[None]:
    """A HookedTransformer with its per-head result and split q/k/v-input switches off for one pass
    (zoo configs turn them on for users' own 3.x hooks; nothing here reads those points, module
    doc). With them on, 3.x materialises [batch, pos, heads, d_head, d_model] in every layer and a
    copy of the residual per head: more than half of a pass's time on zoo models. The same
    function within float rounding; the switches are restored afterwards. Bridges have neither."""
    cfg = model.cfg
    saved = {n: getattr(cfg, n) for n in _HEAVY_SWITCHES if getattr(cfg, n, False)}
    if not saved or tlens.is_bridge(model):
        yield
        return
    try:
        for n in saved:
            setattr(cfg, n, False)
        yield
    finally:
        for n, v in saved.items():
            setattr(cfg, n, v)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Group:
    """The edge patches into one set of readers: Δ = Σ_s W[r, s] (reference_s - current_s)."""

    sources: tuple[str, ...]
    """Writers with a patched edge into some reader of the group, forward order."""
    weights: torch.Tensor
    """[batch or 1, readers, sources]."""

    def delta(self, plan: _Plan) -> torch.Tensor:
        """[batch, pos, readers, d_model]."""
        diff = torch.stack([plan.reference[s] - plan.out[s] for s in self.sources], dim=2)
        if self.weights.shape[0] == 1:
            return torch.einsum("rs,bpsd->bprd", self.weights[0], diff)
        return torch.einsum("brs,bpsd->bprd", self.weights, diff)


@dataclasses.dataclass(kw_only=True)
class _Plan:
    """The hooks of one Adapter.run and the activations they collect (lives for one pass)."""

    a: Adapter
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
    def make(cls, a: Adapter, reference: Mapping[str, torch.Tensor], nodes: Mapping[str, Weight],
             edges: Mapping[tuple[str, str], Weight], read_outputs: Iterable[str], read_inputs: Iterable[str],
             *, batch: int, grad: bool, start: Start | None,
             edge_matrix: tuple[tuple[tuple[str, str], ...], torch.Tensor] | None = None) -> _Plan:
        read_out = tuple(dict.fromkeys(read_outputs))
        read_in = tuple(dict.fromkeys(read_inputs))
        first = 0 if start is None else start.layer
        if not 0 <= first < a.n_layers:
            raise ValueError(f"a pass starts at a block 0..{a.n_layers - 1}, not {first}")
        matrix = None
        if edge_matrix is not None:
            keys, matrix = edge_matrix
            if tuple(matrix.shape) != (batch, len(keys)):
                raise ValueError(f"edge_matrix weights must be [{batch}, {len(keys)}], got {list(matrix.shape)}")
            edges = {**edges, **{tuple(e): _Col(j) for j, e in enumerate(keys)}}
        early_in = [r for r in (*read_in, *(d for _, d in edges)) if _reader_layer(r, a.n_layers) < first]
        early_patch = [w for w in nodes if start is not None and _order(w)[0] < first]
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
            early = [w for w in needed if _order(w)[0] < first]
            missing = [w for w in early if w not in start.outputs]
            if missing:
                raise ValueError(f"the start state has no output for {', '.join(sorted(missing))}")
            plan.out.update({w: _repeat_to(start.outputs[w], batch) for w in early})
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
    sources = sorted({s for r in readers for s in by_reader.get(r, {})}, key=_order)
    col = {s: i for i, s in enumerate(sources)}
    entries = [(i, col[s], w) for i, r in enumerate(readers) for s, w in by_reader.get(r, {}).items()]
    from_matrix = [(i * len(sources) + c, w.j) for i, c, w in entries if isinstance(w, _Col)]
    per_row = bool(from_matrix) or any(isinstance(w, torch.Tensor) and w.dim() > 0 for _, _, w in entries)
    weights = torch.zeros(batch if per_row else 1, len(readers), len(sources))
    for i, c, w in entries:
        if not isinstance(w, _Col):
            weights[:, i, c] = w
    if from_matrix:  # one gather (and, backwards, one scatter) for every matrix weight of the group
        assert matrix is not None
        flat, cols = (torch.tensor(x) for x in zip(*from_matrix))
        weights = weights.flatten(1).index_copy(1, flat, matrix[:, cols].to(weights.dtype)).view_as(weights)
    return _Group(sources=tuple(sources), weights=weights)


def _repeat_to(x: torch.Tensor, batch: int) -> torch.Tensor:
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


def _order(node: str) -> tuple[int, int]:
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
