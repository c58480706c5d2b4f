"""siit.look_inputs: what the battery of no-intervention looks reads from a siit Transformer is what the
model computes (attention patterns that rebuild the heads' outputs; gradients that predict the answer's
change when a node's output moves, through every later node)."""

from __future__ import annotations

import pytest
import torch

from eval.core.looks import battery
from eval.core.tlens import hooked_config
from siit.look_inputs import look_inputs
from siit.initialise import init_weights
from siit.transformer import Patch, Transformer


def _model(causal: bool) -> Transformer:
    cfg = hooked_config(n_layers=2, d_model=16, n_heads=2, d_head=4, d_mlp=32, d_vocab=7, d_vocab_out=5, n_ctx=6,
                        causal=causal)
    model = Transformer(cfg)
    init_weights(model, torch.Generator().manual_seed(3))
    return model.double()


def _inputs(n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, 7, (n, 6), generator=g)
    mask = torch.ones(n, 6, dtype=torch.long)
    mask[::3, 4:] = 0  # some padded rows
    return tokens, mask


@pytest.mark.parametrize("causal", [True, False])
def test_patterns_rebuild_the_heads_outputs(causal: bool) -> None:
    model = _model(causal)
    tokens, mask = _inputs()
    x = look_inputs(model, tokens, mask, {"m0"}, "classification")
    seen = {}
    model.run_with_hooks(tokens, attention_mask=mask,
                         fwd_hooks=[(f"blocks.{l}.attn.hook_{c}", lambda a, hook: seen.__setitem__(hook, a) or a)
                                    for l in range(2) for c in ("v", "z")])
    for l in range(2):
        v, z = seen[f"blocks.{l}.attn.hook_v"], seen[f"blocks.{l}.attn.hook_z"]  # [B, T, H, d_head]
        rebuilt = torch.einsum("bhqk,bkhd->bqhd", x.patterns[l].to(v.dtype), v)
        assert torch.allclose(rebuilt, z, atol=1e-10)


def test_gradients_are_total_derivatives_of_the_answer() -> None:
    model = _model(True)
    tokens, mask = _inputs()
    x = look_inputs(model, tokens, mask, {"a0.h1"}, "classification")
    where = x.label_positions

    def answer(delta: torch.Tensor, layer: int, slot: int) -> float:
        values = x.acts.clone().double()
        values[layer, :, :, slot] += delta
        node = torch.zeros(tokens.shape[0], 2, 3, dtype=torch.bool)
        node[:, layer, slot] = True  # only this node is replaced: later nodes recompute from it
        with torch.no_grad():
            logits = model(tokens, mask, Patch(mask=node, values=values))[0]
        logp = torch.log_softmax(logits, -1).gather(-1, x.labels[..., None])[..., 0]
        return float(logp[where].sum())

    g = torch.Generator().manual_seed(5)
    for layer, slot in ((0, 1), (0, 2), (1, 0)):
        delta = torch.randn(tokens.shape[0], 6, 16, generator=g, dtype=torch.float64) * 1e-6
        predicted = float((x.grads[layer, :, :, slot] * delta).sum())
        assert answer(delta, layer, slot) - answer(0 * delta, layer, slot) == pytest.approx(predicted, rel=1e-3)


def test_look_inputs_leave_the_model_as_it_was() -> None:
    model = _model(True)
    flags = [p.requires_grad for p in model.parameters()]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens, mask = _inputs()
    report = battery(look_inputs(model, tokens, mask, {"a0.h1", "m1"}, "classification"), permutations=100)
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert report["looks"]["probe"]["nodes"] == 6
