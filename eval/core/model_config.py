"""Untrusted JSON config fields -> the checked fields of a zoo model (an allow-list with types and
bounds), and the tensors such a model holds.

config.json comes from the Hub, so it is data, never options: `HookedTransformerConfig(**config)`
would accept `tokenizer_name` / `trust_remote_code` and download and run a publisher's code, and
a `d_vocab` of 1e13 would try to allocate terabytes. Every field the zoo writes (eval.core.tlens
.hooked_config) is listed here with its type and range; any other field is refused, and the
memory the model needs is estimated from the numbers alone, before anything is allocated.
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Bounds: far above any zoo model (Tracr cases have d_model < 100) yet small enough that a config
# can never ask for more memory than a laptop has.
MAX_LAYERS = 48
MAX_HEADS = 128  # planted large-circuit has 99 heads (tests/test_eval/test_security_config.py loads every planted model)
MAX_WIDTH = 8192          # d_model, d_head
MAX_MLP = 32768
MAX_VOCAB = 65536         # d_vocab, d_vocab_out
MAX_CTX = 2048
MAX_MODEL_BYTES = 1 << 30  # weights (float32) + TransformerLens's per-layer causal masks
BYTES_PER_PARAM = 4        # the zoo stores float32 weights only

_INT_FIELDS: dict[str, tuple[int, int]] = {
    "n_layers": (1, MAX_LAYERS),
    "d_model": (1, MAX_WIDTH),
    "n_heads": (1, MAX_HEADS),
    "d_head": (1, MAX_WIDTH),
    "d_mlp": (1, MAX_MLP),
    "d_vocab": (1, MAX_VOCAB),
    "d_vocab_out": (1, MAX_VOCAB),
    "n_ctx": (1, MAX_CTX),
}
_CHOICES: dict[str, tuple[Any, ...]] = {
    "act_fn": ("relu", "gelu"),
    "normalization_type": (None,),
    "attention_dir": ("causal", "bidirectional"),
    "positional_embedding_type": ("standard",),
}
_BOOL_FIELDS = ("use_attn_result", "use_split_qkv_input", "use_hook_mlp_in", "default_prepend_bos")
_OPTIONAL = {"seed": (0, 2**32 - 1)}
REQUIRED_FIELDS = (*_INT_FIELDS, *_CHOICES)
ALLOWED_FIELDS = frozenset((*_INT_FIELDS, *_CHOICES, *_BOOL_FIELDS, *_OPTIONAL))


class ModelConfigError(ValueError):
    """A config field that is unknown, of the wrong type or out of range (one line)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_model_config(config: Any) -> dict[str, Any]:
    """A copy of `config` if every field is allowed, typed and in range; else ModelConfigError.

    Refuses unknown fields (tokenizer_name, trust_remote_code, model_name, ...: anything that would
    make TransformerLens fetch or run something), and configs whose weights would exceed
    MAX_MODEL_BYTES.
    """
    if not isinstance(config, Mapping):
        raise ModelConfigError(f"config must be a JSON object, got {type(config).__name__}")
    unknown = sorted(str(k) for k in config if k not in ALLOWED_FIELDS)
    if unknown:
        shown = ", ".join(repr(k[:60]) for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ModelConfigError(f"config field(s) {shown} not allowed (allowed: {', '.join(sorted(ALLOWED_FIELDS))})")
    missing = [k for k in REQUIRED_FIELDS if k not in config]
    if missing:
        raise ModelConfigError(f"config lacks {', '.join(missing)}")
    for name, (low, high) in {**_INT_FIELDS, **_OPTIONAL}.items():
        if name not in config:
            continue
        value = config[name]
        if not _is_int(value) or not low <= value <= high:
            raise ModelConfigError(f"config {name} must be an integer in [{low}, {high}], got {_short(value)}")
    for name, choices in _CHOICES.items():
        if config[name] not in choices or isinstance(config[name], bool):
            raise ModelConfigError(f"config {name} must be one of {list(choices)}, got {_short(config[name])}")
    for name in _BOOL_FIELDS:
        if name in config and not isinstance(config[name], bool):
            raise ModelConfigError(f"config {name} must be true or false, got {_short(config[name])}")
    need = estimated_bytes(config)
    if need > MAX_MODEL_BYTES:
        raise ModelConfigError(f"config describes a model of about {need / 2**20:.0f} MiB "
                               f"(limit {MAX_MODEL_BYTES / 2**20:.0f} MiB); refused before allocating it")
    return dict(config)


def tensor_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """TransformerLens state-dict names -> shapes for a checked config (no layer norm, standard
    positional embeddings): exactly the tensors a zoo model.safetensors holds."""
    d, h, k = config["d_model"], config["n_heads"], config["d_head"]
    out: dict[str, tuple[int, ...]] = {
        "embed.W_E": (config["d_vocab"], d),
        "pos_embed.W_pos": (config["n_ctx"], d),
    }
    for layer in range(config["n_layers"]):
        a, m = f"blocks.{layer}.attn.", f"blocks.{layer}.mlp."
        out.update({a + "W_Q": (h, d, k), a + "b_Q": (h, k), a + "W_K": (h, d, k), a + "b_K": (h, k),
                    a + "W_V": (h, d, k), a + "b_V": (h, k), a + "W_O": (h, k, d), a + "b_O": (d,),
                    m + "W_in": (d, config["d_mlp"]), m + "b_in": (config["d_mlp"],),
                    m + "W_out": (config["d_mlp"], d), m + "b_out": (d,)})
    out.update({"unembed.W_U": (d, config["d_vocab_out"]), "unembed.b_U": (config["d_vocab_out"],)})
    return out


def estimated_bytes(config: Mapping[str, Any]) -> int:
    """Weights plus TransformerLens's causal-mask buffers, from the numbers alone (0 for fields
    that are not yet checked integers: the type check reports those)."""
    names = ("n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "d_vocab_out", "n_ctx")
    if not all(_is_int(config.get(n)) and config[n] >= 0 for n in names):
        return 0
    L, d, h, k, m, v, vo, ctx = (config[n] for n in names)
    per_layer = 4 * h * d * k + 3 * h * k + d + 2 * d * m + m + d
    params = v * d + ctx * d + L * per_layer + d * vo + vo
    return params * BYTES_PER_PARAM + L * ctx * ctx


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

