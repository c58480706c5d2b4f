"""JSON config fields + a state dict -> a TransformerLens model of the installed major, and back.

The zoo's on-disk format is TransformerLens 3.x's, whichever major is installed: config.json holds
`HookedTransformerConfig` fields and model.safetensors the HookedTransformer state-dict names
(embed.W_E, blocks.{l}.attn.W_Q [H, d_model, d_head], ...). `build_hooked` turns them into

- transformer-lens 3.x: a `HookedTransformer`;
- transformer-lens 4.x (which removed HookedTransformer): a `TransformerBridge` around TL's native
  model (`TransformerBridge.boot_native`, no download), the weights renamed by 4.x's
  `convert_tl_checkpoint`. Logits equal 3.x's within float rounding (tests/test_eval/test_tlens_versions.py).

An attention_mask means something different to the two. 3.x (what Tracr ground truth and SIIT
training assume, see siit/transformer.py): a pad position gets a zero positional embedding and
positions count real tokens only; padded keys are masked only under causal attention, so a
bidirectional model attends to PAD. The 4.x bridge masks padded keys in both directions and adds
the positional embedding everywhere. `tl3_masking` gives any bridge 3.x's reading, and the bridge
`build_hooked` returns applies it in its own forward, so `model(tokens, attention_mask=mask)` is
the same function under either major.

Which hook points hold which node is eval.patching.hooks' business; this module only builds and calls models.
Importing this module costs nothing: torch and transformer_lens (~8 s) are imported when used.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # stdlib only at import: rasp_programs and siit read hooked_config without torch
    import torch

_BRIDGE_DROPS = ("use_attn_result", "use_split_qkv_input")
"""3.x-only switches for per-head result and split q/k/v-input hooks: 4.x ignores them and raises
when those hooks are used; eval.patching.hooks computes the same values from hooks every version has."""
_TL_BUFFERS = ("mask", "IGNORE")
"""Suffixes of buffers HookedTransformer registers but the zoo never saves."""


def tl_major() -> int:
    """Major version of the installed transformer-lens, read without importing it."""
    return int(importlib.metadata.version("transformer-lens").split(".")[0])


def hooked_config(
    *, n_layers: int, d_model: int, n_heads: int, d_head: int, d_mlp: int,
    d_vocab: int, d_vocab_out: int, n_ctx: int, causal: bool, act_fn: str = "relu",
) -> dict[str, Any]:
    """JSON-native HookedTransformerConfig fields for a compiled (or trained) model."""
    return {
        "n_layers": n_layers,
        "d_model": d_model,
        "n_heads": n_heads,
        "d_head": d_head,
        "d_mlp": d_mlp,
        "d_vocab": d_vocab,
        "d_vocab_out": d_vocab_out,
        "n_ctx": n_ctx,
        "act_fn": act_fn,
        "normalization_type": None,
        "attention_dir": "causal" if causal else "bidirectional",
        "positional_embedding_type": "standard",
        "use_attn_result": True,
        "use_split_qkv_input": True,
        "use_hook_mlp_in": True,
        "default_prepend_bos": False,
        "seed": 0,
    }


def build_hooked(config: dict[str, Any], state_dict: dict[str, Any] | None = None, *,
                 device: str | torch.device = "cpu"):
    """The installed major's model from JSON config fields, optionally loading a 3.x-layout state
    dict: a HookedTransformer on transformer-lens 3.x, a TransformerBridge on 4.x, on `device`
    (the CPU unless asked: TransformerLens would otherwise take any GPU it sees)."""
    from eval.core.model_config import check_model_config

    # config.json is data from anywhere: only allow-listed fields reach TransformerLens (no
    # tokenizer / remote code), and sizes are bounded before anything is allocated.
    config = check_model_config(config)
    import transformer_lens  # only now (~8 s), whichever major builds the model

    if tl_major() >= 4:
        return build_bridge(config, state_dict).to(device)
    model = transformer_lens.HookedTransformer(transformer_lens.HookedTransformerConfig(**config, device=str(device)))
    if state_dict is not None:
        # strict=False: TL registers buffers (masks, IGNORE) that are not saved.
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        missing = [k for k in missing if not k.endswith(_TL_BUFFERS)]
        if missing or unexpected:
            raise ValueError(f"state dict does not fit the config: missing {missing}, unexpected {unexpected}")
    model.eval()
    return model


def build_bridge(config: dict[str, Any], state_dict: dict[str, Any] | None = None):
    """A TransformerBridge (transformer-lens 4.x) from checked 3.x config fields and state dict,
    reading attention masks as 3.x does (module doc). Call build_hooked, which checks the config."""
    if tl_major() < 4:
        raise RuntimeError("a TransformerBridge from zoo files needs transformer-lens 4.x "
                           f"(installed: {importlib.metadata.version('transformer-lens')}); use build_hooked")
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    fields = {k: v for k, v in config.items() if k not in _BRIDGE_DROPS}
    fields.setdefault("seed", 0)
    # from_dict drops the fields the bridge does not know; dtype / device stay the defaults.
    cfg = TransformerBridgeConfig.from_dict(fields)
    # A seeded init runs under torch.random.fork_rng: the caller's RNG state is left untouched.
    model = TransformerBridge.boot_native(cfg)
    if state_dict is not None:
        converted = convert_tl_checkpoint({k: v for k, v in state_dict.items() if not k.endswith(_TL_BUFFERS)},
                                          model.cfg)
        try:
            model.load_state_dict(converted, strict=True)
        except RuntimeError as exc:  # strict loading names every missing / unexpected / misshapen key
            raise ValueError(f"state dict does not fit the config: {exc}") from None
    model.__class__ = _tl3_bridge_class()
    model.eval()
    return model


def is_bridge(model: Any) -> bool:
    """Whether `model` is a TransformerBridge (any major) rather than a HookedTransformer or a
    model that only speaks its hook protocol (siit.transformer.Transformer)."""
    if "transformer_lens.model_bridge" not in sys.modules:  # no bridge exists yet: do not import ~8 s
        return False
    try:
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError:  # a 3.x release without the bridge
        return False
    return isinstance(model, TransformerBridge)


def state_dict_3x(model: Any) -> dict[str, torch.Tensor]:
    """The model's weights under TransformerLens 3.x names (what model.safetensors holds), from a
    HookedTransformer or a TransformerBridge: detached copies."""
    if is_bridge(model):
        weights = model.tl_parameters()
    else:
        weights = {k: v for k, v in model.state_dict().items() if not k.endswith(_TL_BUFFERS)}
    return {k: v.detach().clone() for k, v in weights.items()}


def run_with_hooks(model: Any, tokens: torch.Tensor, attention_mask: torch.Tensor | None,
                   fwd_hooks: Sequence[tuple[str, Any]] = (), *,
                   start: tuple[int, torch.Tensor] | None = None, skip_blocks: bool | None = None) -> torch.Tensor:
    """Logits of `model` on `tokens` with TransformerLens forward hooks, the attention mask read as
    3.x reads it, for a HookedTransformer, a bridge from build_hooked, or anyone's TransformerBridge.

    start = (layer, resid): run from block `layer` with `resid` as its resid_pre [batch, pos, d_model]
    instead of from the embedding. A HookedTransformer skips the earlier blocks (3.x's
    `start_at_layer`, which hands the blocks the same attention mask); a bridge runs them and then
    replaces block `layer`'s resid_pre by `resid` (the same logits, no time saved: 4.x's bridge
    has no start_at_layer with 3.x's masking to rely on). Hooks before that block may fire on a
    bridge and must not matter; eval.patching.hooks installs none there. skip_blocks=False forces the
    bridge's way on a HookedTransformer too (tests compare the two).
    """
    hooks = list(fwd_hooks)
    if not is_bridge(model):
        if start is not None and skip_blocks is not False:
            layer, resid = start
            return model.run_with_hooks(resid, start_at_layer=layer, attention_mask=attention_mask, fwd_hooks=hooks)
        return model.run_with_hooks(tokens, attention_mask=attention_mask, fwd_hooks=_resumed(start, hooks))
    hooks = _resumed(start, hooks)
    if getattr(type(model), "zoo_tl3_masking", False):
        return model.run_with_hooks(tokens, attention_mask=attention_mask, fwd_hooks=hooks)
    with tl3_masking(model, attention_mask) as kwargs:
        return model.run_with_hooks(tokens, fwd_hooks=hooks, **kwargs)


def _resumed(start: tuple[int, torch.Tensor] | None, hooks: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Hooks that also replace block start[0]'s resid_pre by start[1] (first on that point, so a
    hook of the caller's there sees the replaced value)."""
    if start is None:
        return hooks
    layer, resid = start
    return [(f"blocks.{layer}.hook_resid_pre", lambda act, hook: resid), *hooks]


@contextlib.contextmanager
def tl3_masking(model: Any, attention_mask: torch.Tensor | None, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Forward keyword arguments that make a TransformerBridge read a [batch, pos] 0/1
    attention_mask as TransformerLens 3.x does (module doc), with a hook that zeroes the positional
    embedding at pad positions installed while the context is open. Other masks pass unchanged."""
    if attention_mask is None or attention_mask.dim() != 2:
        yield {**kwargs, "attention_mask": attention_mask}
        return
    real = attention_mask.bool()
    # 3.x's positions count real tokens (utilities get_offset_position_ids): cumsum - 1, floor 0.
    kwargs.setdefault("position_ids", (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0))
    causal = model.cfg.attention_dir == "causal"
    point = model.hook_dict["hook_pos_embed"]
    # A torch hook put in front of TL's own: user hooks on hook_pos_embed see the zeroed value, as
    # on 3.x, and TL's reset_hooks cannot remove it halfway.
    handle = point.register_forward_hook(
        lambda module, args, out: out.masked_fill(~real[..., None], 0.0), prepend=True)
    try:
        yield {**kwargs, "attention_mask": attention_mask if causal else None}
    finally:
        handle.remove()


@functools.cache
def _tl3_bridge_class() -> type:
    """TransformerBridge whose forward reads attention masks as 3.x does (built once: it
    subclasses a transformer-lens class, which is imported only when a bridge is needed)."""
    import torch
    from transformer_lens.model_bridge import TransformerBridge

    class ZooTransformerBridge(TransformerBridge):
        """A TransformerBridge for zoo models: `attention_mask` means what it means on
        TransformerLens 3.x (eval.core.tlens module doc); everything else is TransformerBridge's."""

        zoo_tl3_masking = True
        """eval.core.tlens.run_with_hooks passes masks straight through to this class."""

        def forward(self, input: Any, *args: Any, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
            if not isinstance(input, torch.Tensor):
                return super().forward(input, *args, attention_mask=attention_mask, **kwargs)
            with tl3_masking(self, attention_mask, **kwargs) as masked:
                return super().forward(input, *args, **masked)

    ZooTransformerBridge.__module__ = __name__
    return ZooTransformerBridge
