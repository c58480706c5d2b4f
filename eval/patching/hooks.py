"""Node names -> TransformerLens hook points, and the interventions every method runs through.

The one module that knows where a node (eval.core.circuit names) lives in a model, for
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
hooks within float rounding (tests/test_eval/test_hooks.py).

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
    starts = adapter.starts(tokens, mask)                   # the clean pass's state at every block
    run = adapter.run(tokens, mask, reference=cf, edges={("m0", "a1.h0<q>"): 1.0},
                      start=starts[1])                      # the same logits, block 0 not run

Attention masks are read as TransformerLens 3.x reads them (eval.core.tlens.run_with_hooks).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from eval.core import tlens
from eval.core.circuit import INPUT, head_node, mlp_node, parse_node
from eval.patching.edge_groups import GroupKey, GroupLayout, GroupWeights, Offsets, feeds  # noqa: F401 (public here)
from eval.patching.hook_plan import QKV, Plan, Start, Weight, order, repeat_to  # noqa: F401 (QKV, Weight: public here)



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
            edge_matrix: tuple[tuple[tuple[str, str], ...], torch.Tensor] | None = None,
            groups: GroupWeights | None = None, offsets: Offsets | None = None) -> Run:
        """One forward pass with interventions, reading activations on the way.

        reference: writer -> the value it is patched towards, [batch or 1, pos, d_model]; for edge
          patches also [a divisor of batch, pos, d_model], its copies one block after another.
        nodes: writer -> w: every reader sees the writer's output as (1-w)·own + w·reference.
        edges: (writer, reader) -> w: only that reader sees the writer as (1-w)·current +
          w·reference (MIB's edge patching; current = the writer's output in this pass). A whole
          head `a{l}.h{h}` as reader means its q, k and v inputs.
        read_outputs / read_inputs: writers / readers whose values to return in the Run.
        grad: run with autograd; returned activations keep their .grad after a backward pass.
        edge_matrix: (keys, W [G, len(keys)]): edge keys[j] weighted W[g, j] on row block g (G blocks
          of batch // G consecutive rows; G = batch: per row), for many edges at once (ACDC, edge
          subnetwork probing): one gather and a few large products per layer instead of a slice per
          edge and a product per row, forwards and backwards.
        groups: edge patches as dense weights per reader group on a GroupLayout made once (instead
          of edges / edge_matrix), for sweeps that pass the same edges with new weights (ACDC).
        offsets: fixed changes added to readers' inputs (eval.patching.edge_groups.Offsets).
        start: begin at block start.layer from this state (`starts`) instead of at the embedding;
          the same logits as the full pass when nothing before that block is patched, which is
          then refused (node patches of earlier writers, edges into earlier readers). Writers
          before it keep start.outputs; tokens still give the batch and the bridge's fallback.
        """
        batch = int(tokens.shape[0])
        plan = Plan.make(self, reference or {}, nodes or {}, edges or {}, read_outputs, read_inputs,
                          batch=batch, grad=grad, start=start, edge_matrix=edge_matrix, groups=groups,
                          offsets=offsets)
        resume = None if start is None else (start.layer, repeat_to(start.resid, batch))
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
        plan = Plan.make(self, reference or {}, nodes or {}, {}, writers, (), batch=int(tokens.shape[0]),
                          grad=False, start=None)
        plan.keep_resid = True
        with torch.no_grad(), _lean(self.model):
            tlens.run_with_hooks(self.model, tokens, attention_mask, plan.hooks())
        return tuple(Start(layer=l, resid=plan.resid_pre[l],
                           outputs={w: plan.out[w] for w in writers if order(w)[0] < l})
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
        raise ValueError(f"eval.patching.hooks needs a model without LayerNorm (zoo models); got {cfg.normalization_type!r}")
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
