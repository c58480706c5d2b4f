"""Parameters + gradients -> Adam updates (the learning rate is set per step by siit.adaptation).

A few lines of Adam instead of torch.optim.Adam: constructing torch's optimiser imports
torch._dynamo (~2.7 s here), a quarter of the time budget of a whole `zoo train case 33`.
Same update rule as torch.optim.Adam (bias-corrected moments, eps added to the corrected sqrt).
State is plain tensors so checkpoints can be safetensors.
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
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
            if p.grad is None:
                continue
            if self.weight_decay:
                p.mul_(1.0 - self.lr * self.weight_decay)
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {f"exp_avg.{i}": t for i, t in enumerate(self.exp_avg)}
        out.update({f"exp_avg_sq.{i}": t for i, t in enumerate(self.exp_avg_sq)})
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], steps: int) -> None:
        for i in range(len(self.params)):
            self.exp_avg[i].copy_(tensors[f"exp_avg.{i}"])
            self.exp_avg_sq[i].copy_(tensors[f"exp_avg_sq.{i}"])
        self.steps = steps

