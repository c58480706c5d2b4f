"""Parameters + gradients -> Adam updates (the learning rate is set per step by siit.adaptation).

A few lines of Adam instead of torch.optim.Adam: constructing torch's optimiser imports
torch._dynamo (~2.7 s here), a quarter of the time budget of a whole `zoo train case 33`.
Same update rule as torch.optim.Adam (bias-corrected moments, eps added to the corrected sqrt;
tests/test_siit/test_optim.py compares the two), applied with one foreach call per operation over
all parameters (case 33's 29 tensors: 0.50 -> 0.40 ms a step, the same bits). State is plain tensors
so checkpoints can be safetensors.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Adam:
    """Adam (Kingma & Ba) with the learning rate set per step by the caller, and optional decoupled
    weight decay (AdamW, Loshchilov & Hutter): p <- p * (1 - lr * weight_decay) before the update."""

    def __init__(self, params: Iterable[torch.nn.Parameter], *, lr: float,
                 betas: tuple[float, float], eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.steps, 1 - b2**self.steps
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        # one foreach kernel call per operation over every parameter, instead of one per parameter
        # (a small model's step is dispatch-bound); the same element-wise arithmetic in the same
        # order as the per-parameter loop, so the same bits
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params]
        m, v = [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live]
        if self.weight_decay:
            torch._foreach_mul_(params, 1.0 - self.lr * self.weight_decay)
        torch._foreach_mul_(m, b1)
        torch._foreach_add_(m, grads, alpha=1 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
        denom = torch._foreach_div(v, c2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, m, denom, value=-self.lr / c1)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {f"exp_avg.{i}": t for i, t in enumerate(self.exp_avg)}
        out.update({f"exp_avg_sq.{i}": t for i, t in enumerate(self.exp_avg_sq)})
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], steps: int) -> None:
        for i in range(len(self.params)):
            self.exp_avg[i].copy_(tensors[f"exp_avg.{i}"])
            self.exp_avg_sq[i].copy_(tensors[f"exp_avg_sq.{i}"])
        self.steps = steps

