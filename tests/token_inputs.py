"""Hand-made token inputs for the distractor tests: BOS (id 0), an input of tokens 2-8, PAD (id 1)."""

from __future__ import annotations

import torch


def token_inputs(n: int = 4000, n_ctx: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """long tokens [n, n_ctx] and bool mask [n, n_ctx] (BOS and the input) of random lengths 1 to n_ctx - 1."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, n_ctx, (n,), generator=gen)
    mask = torch.arange(n_ctx)[None] <= lengths[:, None]
    tokens = torch.randint(2, 9, (n, n_ctx), generator=gen)
    tokens[:, 0], tokens[~mask] = 0, 1
    return tokens, mask
