"""A fresh siit.transformer.Transformer -> its seeded initial weights (what training starts from)."""

from __future__ import annotations

import math

import torch

from siit.transformer import Transformer


def init_weights(model: Transformer, generator: torch.Generator, *, output_scale: float = 1.0) -> None:
    """Normal init with std 1/sqrt(fan_in), biases zero, seeded. `output_scale` multiplies the std
    of the matrices that write into the residual stream (W_O, W_out): components then start close
    to inert, which is what strictness asks of every non-aligned node."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.rsplit(".", 1)[-1].startswith("b_"):
                param.zero_()
                continue
            fan_in = param.shape[-2] if param.dim() >= 2 else param.shape[-1]
            if name.endswith(("W_E", "W_pos")):
                fan_in = param.shape[-1]
            if name.endswith("W_O"):  # the heads' outputs are summed: fan-in is H * d_head
                fan_in = param.shape[0] * param.shape[1]
            scale = output_scale if name.endswith(("W_O", "W_out")) else 1.0
            param.normal_(0.0, scale / math.sqrt(fan_in), generator=generator)
