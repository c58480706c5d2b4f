"""Tracr's assembled haiku model -> TransformerLens HookedTransformer (config + state dict).

The mapping (REFERENCE.md, verified against tracr's own forward pass in tests):
query/key/value w [d, H*k] -> W_Q/W_K/W_V [H, d, k]; attn linear w [H*k, d] -> W_O [H, k, d];
mlp linear_1 -> W_in/b_in, linear_2 -> W_out/b_out; W_U projects the residual stream onto the
output directions (one-hot columns), b_U = 0. Tracr scales attention by 1/sqrt(key_size) like TL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from eval.core.tlens import hooked_config
from rasp_programs.case import Case


def assembled_to_hooked(
    assembled: Any, case: Case, output_columns: list[int]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Config fields and state dict of the HookedTransformer equal to tracr's `assembled` model.

    `output_columns[j]` is the residual index of output value j (one column of W_U each).
    """
    cfg = assembled.model_config
    params = {k: {p: np.asarray(v, dtype=np.float32) for p, v in d.items()} for k, d in assembled.params.items()}
    d_model = params["token_embed"]["embeddings"].shape[1]
    n_heads, d_head = cfg.num_heads, cfg.key_size
    config = hooked_config(
        n_layers=cfg.num_layers, d_model=d_model, n_heads=n_heads, d_head=d_head,
        d_mlp=cfg.mlp_hidden_size, d_vocab=params["token_embed"]["embeddings"].shape[0],
        d_vocab_out=len(output_columns), n_ctx=case.max_seq_len + 1, causal=case.causal,
    )
    t = lambda a: torch.tensor(np.ascontiguousarray(a), dtype=torch.float32)  # noqa: E731
    sd: dict[str, torch.Tensor] = {
        "embed.W_E": t(params["token_embed"]["embeddings"]),
        "pos_embed.W_pos": t(params["pos_embed"]["embeddings"][: case.max_seq_len + 1]),
    }
    for layer in range(cfg.num_layers):
        attn, mlp = f"transformer/layer_{layer}/attn", f"transformer/layer_{layer}/mlp"
        for name, key in (("query", "Q"), ("key", "K"), ("value", "V")):
            w = params[f"{attn}/{name}"]["w"].reshape(d_model, n_heads, d_head).transpose(1, 0, 2)
            sd[f"blocks.{layer}.attn.W_{key}"] = t(w)  # [H, d_model, d_head]
            sd[f"blocks.{layer}.attn.b_{key}"] = t(params[f"{attn}/{name}"]["b"].reshape(n_heads, d_head))
        sd[f"blocks.{layer}.attn.W_O"] = t(params[f"{attn}/linear"]["w"].reshape(n_heads, d_head, d_model))
        sd[f"blocks.{layer}.attn.b_O"] = t(params[f"{attn}/linear"]["b"])
        sd[f"blocks.{layer}.mlp.W_in"] = t(params[f"{mlp}/linear_1"]["w"])
        sd[f"blocks.{layer}.mlp.b_in"] = t(params[f"{mlp}/linear_1"]["b"])
        sd[f"blocks.{layer}.mlp.W_out"] = t(params[f"{mlp}/linear_2"]["w"])
        sd[f"blocks.{layer}.mlp.b_out"] = t(params[f"{mlp}/linear_2"]["b"])
    w_u = np.zeros((d_model, len(output_columns)), dtype=np.float32)
    for j, col in enumerate(output_columns):
        w_u[col, j] = 1.0
    sd["unembed.W_U"] = t(w_u)
    sd["unembed.b_U"] = torch.zeros(len(output_columns))
    return config, sd
