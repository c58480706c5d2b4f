"""The realism pieces on hand-made data: activation statistics and heuristic AUROCs (eval.core.node_heuristics),
distractor targets and the loudness reference (siit.distractors), the function-preserving head
rescale (siit.reparametrize)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.node_heuristics import NodeStats, activation_stats, heuristic_aurocs, node_weights, variance_floor_ratio
from eval.core.tlens import hooked_config
from siit.correspondence import NodeLayout
from siit.distractors import (Distractor, DistractorTargets, loudness, make_distractors, node_outputs,
                              r_squared, raw_targets, readout, stratified)
from siit.reparametrize import rescale_heads
from siit.target_offsets import offsets_for_norm
from siit.initialise import init_weights
from siit.transformer import Transformer


def test_activation_stats_known_values() -> None:
    # two inputs, three positions; the last position is real in one input only (no variance there)
    act = torch.zeros(2, 3, 2)
    act[0, :, 0] = torch.tensor([3.0, 1.0, 5.0])
    act[1, :, 0] = torch.tensor([3.0, -1.0, 0.0])
    act[:, :, 1] = 4.0
    positions = torch.tensor([[True, True, True], [True, True, False]])
    norm, variance = activation_stats(act, positions)
    norms = [5.0, math.sqrt(17), math.sqrt(41), 5.0, math.sqrt(17)]
    assert norm == pytest.approx(sum(norms) / 5)
    # position 0: no spread; position 1: values 1 and -1, sample variance 2; weighted by count (2 each)
    assert variance == pytest.approx((0.0 * 2 + 2.0 * 2) / 4)


def _row(node: str, inside: bool, value: float) -> NodeStats:
    return NodeStats(node=node, in_circuit=inside, output_norm=value, output_variance=value, weight_norm=value,
                     output_weight_norm=value, logit_variance=value)


def test_heuristic_auroc_and_separation() -> None:
    loud_circuit = [_row("a0.h0", True, 9.0), _row("a0.h1", False, 1.0), _row("m0", False, 2.0)]
    quiet_circuit = [_row("a0.h0", True, 0.5), _row("a0.h1", False, 1.0), _row("m0", False, 2.0)]
    middle = [_row("a0.h0", True, 1.5), _row("a0.h1", False, 1.0), _row("m0", False, 2.0)]
    assert heuristic_aurocs(loud_circuit)["output_norm"] == {"auroc": 1.0, "separation": 1.0}
    # ranking the circuit last gives it away just as well
    assert heuristic_aurocs(quiet_circuit)["output_norm"] == {"auroc": 0.0, "separation": 1.0}
    assert heuristic_aurocs(middle)["weight_norm"] == {"auroc": 0.5, "separation": 0.5}


def test_variance_floor_ratio() -> None:
    rows = [_row("a0.h0", True, 4.0), _row("m0", True, 8.0), _row("a0.h1", False, 1.5), _row("a0.h2", False, 9.0)]
    assert variance_floor_ratio(rows) == pytest.approx(1.5 / 6.0)


def test_distractor_targets_follow_their_definitions() -> None:
    feature = (0.5, -1.0, 0.25, 2.0)  # ids 0..3; id 3 plays BOS
    tokens = torch.tensor([[3, 0, 1, 2, 1]])
    mask = torch.ones_like(tokens)
    make = lambda kind, offset=0: Distractor(node="a0.h0", kind=kind, offset=offset, variance_factor=1.0,  # noqa: E731
                                              offset_factor=1.0, feature=feature, position_code=(0.0, 0.1, 0.2, 0.3, 0.4))
    prev2 = raw_targets(make("previous_token", 2), tokens, mask)[0].tolist()
    assert prev2[1:] == [0.5, 0.5, 0.5, -1.0]  # positions 1, 2 reach back to the first input token
    running = raw_targets(make("running_mean"), tokens, mask)[0, 1:].tolist()
    assert running == pytest.approx([0.5, -0.25, -0.25 / 3, -1.25 / 4])  # features 0.5, -1, .25, -1
    whole = raw_targets(make("input_mean"), tokens, mask)[0, 1:].tolist()
    assert whole == pytest.approx([-1.25 / 4] * 4)
    tp = raw_targets(make("token_position"), tokens, mask)[0, 1:].tolist()
    assert tp == pytest.approx([abs(0.5 - 0.1), abs(-1.0 - 0.2), abs(0.25 - 0.3), abs(-1.0 - 0.4)])


def test_stratified_factors_put_the_reference_in_the_middle() -> None:
    f = stratified(9, 3.0, np.random.default_rng(0))
    assert f.min() >= 1 / 3 and f.max() <= 3.0 + 1e-9
    assert np.median(f) == pytest.approx(1.0, rel=0.3)
    assert (f < 1).sum() in (4, 5)
    gap = 3.0 ** (2 / 10)  # one stratum: nothing sits closer than that to the reference
    assert np.abs(np.log(f)).min() >= np.log(gap) - 1e-9
    for q, below in ((0.4, 4), (0.6, 5), (0.3, 3)):
        assert (stratified(9, 2.2, np.random.default_rng(1), q) < 1).sum() == below


def test_targets_scale_with_the_reference_and_readout_r2() -> None:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 6, (400, 6), generator=gen)
    mask = torch.ones_like(tokens)
    positions = torch.ones_like(tokens, dtype=torch.bool)
    positions[:, 0] = False
    spec = make_distractors(["a0.h0", "m0"], d_vocab=6, n_ctx=6, causal=True, seed=0, spread=3.0)
    targets = DistractorTargets.fit(spec, [(0, 0), (0, 1)], tokens, mask, positions, causal=True)
    # reference (variance 0.25, mean norm 5): every target's mean |y| can reach its norm
    y = targets(tokens, mask, torch.tensor([0.25, 5.0]))
    for i, d in enumerate(spec):
        per_position_var = y[i][:, 1:].var(0)
        assert per_position_var.mean().item() == pytest.approx(0.25 * d.variance_factor, rel=0.05)
        assert y[i][:, 1:].abs().mean().item() == pytest.approx(5.0 * math.sqrt(d.offset_factor), rel=0.02)
    # a node whose output is exactly target x direction is read perfectly
    direction = torch.zeros(2, 4)
    direction[:, 1] = 3.0  # normalised inside readout
    acts = torch.zeros(1, 400, 6, 2, 4)
    acts[0, :, :, 0, 1], acts[0, :, :, 1, 1] = y[0], y[1]
    pred = readout(node_outputs(acts, targets.slots), direction)
    assert torch.allclose(r_squared(pred, y, positions), torch.ones(2))
    ref = loudness(node_outputs(acts, torch.tensor([[0, 0], [0, 1]])), positions)
    assert ref[0].item() == pytest.approx(float(np.median([y[0][:, 1:].var(0).mean(), y[1][:, 1:].var(0).mean()])), rel=0.02)
    assert ref[1].item() == pytest.approx(float(np.median([y[0][:, 1:].abs().mean(), y[1][:, 1:].abs().mean()])), rel=0.02)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.1, 3.0), st.floats(0.0, 6.0), st.integers(0, 2**31))
def test_offsets_for_norm_reach_the_norm_or_the_quietest_offset(scale, norm, seed) -> None:
    z = torch.from_numpy(np.random.default_rng(seed).exponential(1.0, (1, 2000)) - 1.0).float()  # skewed, mean 0
    o = offsets_for_norm(z, torch.tensor([scale]), torch.tensor([norm]))
    g = lambda off: float((off + scale * z).abs().mean())  # noqa: E731
    quietest = g(-scale * float(z.median()))
    if norm >= quietest:
        assert g(o) == pytest.approx(norm, abs=1e-3)
    else:  # below the minimum: the offset that minimises the mean norm
        assert g(o) == pytest.approx(quietest, abs=1e-3)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31))
def test_offsets_stop_at_the_fixed_point_with_the_bits_of_all_iterations(rows, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(rows, 500, generator=gen) ** 3  # heavy-tailed
    scale, norm = torch.rand(rows, generator=gen) * 3 + 0.05, torch.rand(rows, generator=gen) * 5
    median, abs_mean = z.median(dim=1).values, z.abs().mean(1)
    lo = -scale * median
    hi = lo + lo.abs() + norm + scale * abs_mean + 1e-6
    for _ in range(40):  # the plain bisection, every iteration
        mid = (lo + hi) / 2
        above = (mid[:, None] + scale[:, None] * z).abs().mean(1) > norm
        hi, lo = torch.where(above, mid, hi), torch.where(above, lo, mid)
    assert torch.equal(offsets_for_norm(z, scale, norm), (lo + hi) / 2)


def test_standardised_targets_of_a_row_do_not_depend_on_its_batch() -> None:
    # training indexes a table computed once over its training set (Setup.distractor_z)
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 7, (64, 6), generator=gen)
    lengths = torch.randint(2, 7, (64,), generator=gen)
    mask = (torch.arange(6)[None] < lengths[:, None]).long()
    spec = make_distractors(["a0.h0", "a0.h1", "m0"], d_vocab=7, n_ctx=6, causal=True, seed=1, spread=2.0)
    targets = DistractorTargets.fit(spec, [(0, 0), (0, 1), (0, 2)], tokens, mask, mask.bool(), causal=True)
    rows = torch.randint(0, 64, (20,), generator=gen)
    table = targets.standardised(tokens, mask)
    assert torch.equal(table[:, rows], targets.standardised(tokens[rows], mask[rows]))
    ref = torch.tensor([0.7, 1.3])
    assert torch.equal(targets.scaled(table[:, rows], ref[None])[0], targets(tokens[rows], mask[rows], ref))


@pytest.mark.parametrize("causal", [True, False])
def test_head_rescale_preserves_function_and_moves_norms(causal: bool) -> None:
    cfg = hooked_config(n_layers=2, d_model=16, n_heads=4, d_head=4, d_mlp=64, d_vocab=7, d_vocab_out=5,
                        n_ctx=6, causal=causal, act_fn="gelu")
    model = Transformer(cfg)
    init_weights(model, torch.Generator().manual_seed(1))
    tokens = torch.randint(0, 7, (32, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(tokens)
    before_logits, before_acts = model(tokens, mask, return_acts=True)
    before_norms = {k: float(torch.cat([t.flatten() for t in v]).norm())
                    for k, v in node_weights(model.state_dict(), 2, 4).items()}
    factors = rescale_heads(model, NodeLayout(2, 4), seed=0)
    after_logits, after_acts = model(tokens, mask, return_acts=True)
    assert torch.allclose(before_logits, after_logits, atol=1e-4)
    assert torch.allclose(before_acts, after_acts, atol=1e-4)  # every head and MLP output unchanged
    after_norms = {k: float(torch.cat([t.flatten() for t in v]).norm())
                   for k, v in node_weights(model.state_dict(), 2, 4).items()}
    assert set(factors) == {f"a{l}.h{h}" for l in range(2) for h in range(4)}
    moved = [k for k in factors if abs(after_norms[k] - before_norms[k]) > 1e-3 * before_norms[k]]
    assert len(moved) == 8
    assert after_norms["m0"] == before_norms["m0"] and after_norms["m1"] == before_norms["m1"]
    # a second model with the same seed gets the same factors (reproducible from the seed)
    again = Transformer(cfg)
    init_weights(again, torch.Generator().manual_seed(1))
    assert rescale_heads(again, NodeLayout(2, 4), seed=0) == factors


def test_circuit_heads_draw_strata_inside_the_band() -> None:
    from siit.distractors import CIRCUIT_BAND
    from siit.reparametrize import _place

    names = [f"a{l}.h{h}" for l in range(3) for h in range(4)]
    circuit = {"a0.h1", "a2.h3"}
    for seed in range(20):
        factors = _place(names, circuit, 1.5, np.random.default_rng(seed))
        order = sorted(range(len(names)), key=lambda i: factors[i])
        for i, name in enumerate(names):
            if name in circuit:
                quantile = (order.index(i) + 0.5) / len(names)
                assert CIRCUIT_BAND[0] <= quantile <= CIRCUIT_BAND[1], (seed, name, quantile)
