"""siit.optim.Adam against torch.optim.Adam / AdamW: the same update, step by step; a parameter that
gets no gradient on a step is left exactly as it was (its moments too)."""

from __future__ import annotations

import pytest
import torch

from siit.optim import Adam


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch(weight_decay: float) -> None:
    gen = torch.Generator().manual_seed(0)
    shapes = [(6, 5), (5,), (3, 6, 2), (1,)]
    ours = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = Adam(ours, lr=0.01, betas=(0.9, 0.9), weight_decay=weight_decay)
    cls = torch.optim.AdamW if weight_decay else torch.optim.Adam
    ref_opt = cls(ref, lr=0.01, betas=(0.9, 0.9), weight_decay=weight_decay)
    for step in range(6):
        opt.zero_grad()
        ref_opt.zero_grad()
        for p, q in zip(ours, ref):
            g = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        ref_opt.step()
        for p, q in zip(ours, ref):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_parameter_without_gradient_is_left_alone() -> None:
    p, q = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    opt = Adam([p, q], lr=0.1, betas=(0.9, 0.9), weight_decay=0.1)
    p.grad = torch.ones(3)
    opt.step()
    assert torch.equal(q, torch.ones(2)) and not torch.equal(p, torch.ones(3))
    assert torch.equal(opt.exp_avg[1], torch.zeros(2)) and torch.equal(opt.exp_avg_sq[1], torch.zeros(2))
    opt.zero_grad()
    opt.step()  # no gradient anywhere: nothing moves
    assert torch.equal(q, torch.ones(2))
