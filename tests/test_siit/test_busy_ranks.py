"""The circuit's running participation ratio (siit.busy_ranks), which busy nodes' component shares follow:
the measurement against the look's own, the held copy's band, the type each busy node follows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.looks.activations import _centred_rows, _participation, _spectrum
from siit.busy_ranks import HOLD_BAND, RankReference, fill_shares, participation


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_participation_is_the_output_rank_look_s(seed: int, rank: int) -> None:
    """tr(C)² / tr(C²) without eigenvalues equals eval.core.looks.activations.output_rank's participation
    ratio of the same outputs (each minus its position's mean over the inputs that have it, pooled)."""
    gen = torch.Generator().manual_seed(seed)
    B, T, d = 40, 5, 8
    out = torch.randn(2, B, T, rank, generator=gen, dtype=torch.float64) @ torch.randn(rank, d, generator=gen,
                                                                                        dtype=torch.float64)
    positions = torch.rand(B, T, generator=gen) < 0.8
    positions[:, 0] = True
    ours = participation(out, positions.double())
    for n in range(2):
        look = _participation(_spectrum(_centred_rows(out[n], positions)))
        assert float(ours[n]) == pytest.approx(look, rel=1e-9)
    assert float(participation(torch.zeros(1, B, T, d), positions.float())[0]) == 0.0  # never varies: 0, as the look


def test_one_direction_counts_one_and_k_equal_directions_k() -> None:
    gen = torch.Generator().manual_seed(0)
    B, T, d = 400, 3, 6
    basis = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))[0]
    for k in (1, 3):
        out = torch.randn(1, B, T, k, generator=gen, dtype=torch.float64) @ basis[:k]
        assert float(participation(out, torch.ones(B, T, dtype=torch.float64))[0]) == pytest.approx(k, rel=0.05)


def _circuit(ratio_heads: float, ratio_mlp: float | None, B: int = 300, T: int = 3, d: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Two circuit heads writing `ratio_heads` equal directions (an integer) and one MLP `ratio_mlp` (or none)."""
    gen = torch.Generator().manual_seed(1)
    outs, mlp = [], []
    for r, is_mlp in [(ratio_heads, False), (ratio_heads, False)] + ([(ratio_mlp, True)] if ratio_mlp else []):
        k = int(r)
        outs.append(torch.randn(B, T, k, generator=gen) @ torch.eye(d)[:k])
        mlp.append(is_mlp)
    return torch.stack(outs), torch.tensor(mlp)


def test_the_reference_is_per_type_and_a_missing_type_takes_the_other_s() -> None:
    ranks = RankReference()
    out, is_mlp = _circuit(2, 4)
    ranks.track(out, torch.ones(out.shape[1], out.shape[2]), is_mlp)
    assert ranks.reference.tolist() == pytest.approx([2.0, 4.0], rel=0.1)
    assert torch.equal(ranks.held, ranks.reference)  # the first measurement is taken as it is
    alone = RankReference()
    out, is_mlp = _circuit(3, None)
    alone.track(out, torch.ones(out.shape[1], out.shape[2]), is_mlp)
    assert alone.reference[1] == alone.reference[0]  # no circuit MLP: busy MLPs follow the heads


def test_the_held_ratios_move_past_the_band_only() -> None:
    ranks = RankReference()
    ranks.reference.copy_(torch.tensor([2.0, 3.0]))
    ranks.held.copy_(torch.tensor([2.0, 3.0]))
    weight = torch.ones(300, 3)
    small, is_mlp = _circuit(2, 3)  # the same as held: no move
    for _ in range(5):
        ranks.track(small, weight, is_mlp)
    assert ranks.held.tolist() == pytest.approx([2.0, 3.0])
    wide, is_mlp = _circuit(4, 6)  # twice the ratios: the held copy stays until the running one leaves the band
    ranks.track(wide, weight, is_mlp)
    assert ranks.held.tolist() == pytest.approx([2.0, 3.0]) and float(ranks.reference[0]) > 2.1
    for _ in range(10):
        ranks.track(wide, weight, is_mlp)
    assert float(ranks.held[0]) > 2.0 * HOLD_BAND * 0.99 and float(ranks.held[0]) <= float(ranks.reference[0])


def test_a_busy_node_s_ratio_is_its_factor_times_its_type_s_within_its_components() -> None:
    ranks = RankReference()
    ranks.held.copy_(torch.tensor([1.5, 4.0]))
    got = ranks.ratios(torch.tensor([0.5, 2.0, 2.0, 0.5]), torch.tensor([False, False, True, True]),
                       torch.tensor([4, 2, 6, 6]))
    assert got.tolist() == pytest.approx([1.0, 2.0, 6.0, 2.0])  # floor 1, its components' count, the MLPs' 4.0


def test_fill_shares_fills_components_in_order() -> None:
    ratio = torch.tensor([1.0, 2.0, 2.5, 2.5, 2.5, 3.0], dtype=torch.float64)
    index = torch.tensor([0, 0, 0, 1, 2, 1], dtype=torch.float64)
    got = fill_shares(ratio, index)
    assert got[0] == 0 and got[1] == 1 and got[2] == 1 and 0 < got[3] < 1 and got[4] == 0 and got[5] == 1
    eig = torch.tensor([1.0, 1.0, float(got[3])], dtype=torch.float64)
    assert _participation(eig) == pytest.approx(2.5, abs=1e-9)
