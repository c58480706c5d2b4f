"""Input shapes: a padded batch with some positions marked absent (`present`) computes exactly what
TransformerLens computes on the same inputs cut short - unpadded, or padded to a shorter length with
an attention mask - so training and validation in one padded batch cover every shape a user feeds.
Also: the shaped validation copies share their pairs, so causal models give identical metrics."""

from __future__ import annotations

import pytest
import torch

from eval.core.tlens import build_hooked, hooked_config
from siit.data import SHAPES, Dataset, present_mask, random_shapes, with_shapes
from siit.initialise import init_weights
from siit.transformer import Transformer

N_CTX, PAD = 6, 6


def _model(causal: bool) -> tuple[dict, Transformer]:
    cfg = hooked_config(n_layers=2, d_model=12, n_heads=3, d_head=4, d_mlp=20, d_vocab=7,
                        d_vocab_out=5, n_ctx=N_CTX, causal=causal, act_fn="gelu")
    model = Transformer(cfg)
    init_weights(model, torch.Generator().manual_seed(3))
    return cfg, model


def _batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    lengths_t = torch.tensor(lengths)
    mask = (torch.arange(N_CTX)[None] <= lengths_t[:, None]).long()  # BOS + input
    tokens = torch.where(mask.bool(), torch.randint(0, 6, (len(lengths), N_CTX), generator=gen), PAD)
    return tokens, mask, lengths_t


@pytest.mark.parametrize("causal", [True, False])
def test_present_equals_transformer_lens_on_cut_inputs(causal: bool) -> None:
    cfg, model = _model(causal)
    tl = build_hooked(cfg, model.state_dict())
    tokens, mask, lengths = _batch([1, 2, 3, 4, 5, 3])
    for kept in range(0, N_CTX - 1):  # PAD positions kept after the input
        pads = torch.minimum(torch.full_like(lengths, kept), N_CTX - 1 - lengths)
        present = present_mask(lengths, N_CTX, pads)
        ours = model(tokens, mask, present=present)[0]
        for row, (n, k) in enumerate(zip(lengths.tolist(), pads.tolist())):
            width = n + 1 + k
            cut, cut_mask = tokens[row : row + 1, :width], mask[row : row + 1, :width]
            with torch.no_grad():
                # unpadded inputs go in as users send them: no attention mask
                theirs = tl(cut) if k == 0 else tl(cut, attention_mask=cut_mask)
            assert torch.allclose(ours[row, : n + 1], theirs[0, : n + 1], atol=1e-5), (row, kept)


def test_bidirectional_shapes_differ_without_training() -> None:
    """The reason for shape training: an untrained bidirectional model attends to PAD keys."""
    _, model = _model(causal=False)
    tokens, mask, lengths = _batch([2, 3])
    padded = model(tokens, mask)[0]
    unpadded = model(tokens, mask, present=present_mask(lengths, N_CTX, torch.zeros_like(lengths)))[0]
    assert not torch.allclose(padded[:, 1:3], unpadded[:, 1:3], atol=1e-3)


def test_random_shapes_cover_every_pad_count() -> None:
    lengths = torch.full((3000,), 2)
    kept = random_shapes(lengths, N_CTX, torch.Generator().manual_seed(0))[0]
    assert set(kept.tolist()) == set(range(N_CTX - 2))  # 0 (unpadded) .. 3 (padded to n_ctx)
    assert (kept == 0).float().mean() > 0.3 and (kept == N_CTX - 3).float().mean() > 0.3


def test_with_shapes_repeats_rows_with_their_present_masks() -> None:
    tokens, mask, lengths = _batch([1, 3, 5])
    data = Dataset(tokens=tokens, mask=mask, lengths=lengths, labels=torch.zeros_like(tokens),
                   high_acts=torch.zeros(1, 3, N_CTX, 2, 4), seqs=((0,), (0, 0, 0), (0,) * 5))
    shaped = with_shapes(data, SHAPES, torch.Generator().manual_seed(0))
    assert len(shaped) == 9 and shaped.shape_ids.tolist() == [0] * 3 + [1] * 3 + [2] * 3
    assert shaped.present[:3].all()  # padded: every position
    assert shaped.present[3:6].sum(1).tolist() == [2, 4, 6]  # unpadded: BOS + input
    partly = (shaped.present[6:9].sum(1) - (lengths + 1)).tolist()  # PADs kept; the rows have 4, 2, 0
    assert 1 <= partly[0] <= 3 and partly[1] == 1 and partly[2] == 0  # some, never none or all if room


def test_evaluation_and_training_report_each_input_shape(compiled) -> None:
    """A bidirectional model is validated on every input shape pooled; `by_shape` says which shape
    lags. Each pooled score is the position-weighted mean of the shapes' scores."""
    from siit.config import TrainConfig
    from siit.trainer import prepare, train

    case = compiled("2")  # reverse: bidirectional
    config = TrainConfig(n_train=256, n_val=64, batch_size=32, epochs=1, eval_every=8)
    s = prepare(case, config)
    assert s.vary_shapes
    model = Transformer(s.low_config)
    init_weights(model, torch.Generator().manual_seed(0))
    metrics = s.final_evaluator.evaluate(model)
    by = metrics["by_shape"]
    assert list(by) == list(SHAPES)
    counts = {k: v["labelled_positions"] for k, v in by.items()}
    assert sum(counts.values()) == int(s.final_evaluator.data.label_mask.sum())
    pooled = sum(counts[k] * by[k]["accuracy"] for k in by) / sum(counts.values())
    assert pooled == pytest.approx(metrics["accuracy"], abs=1e-6)
    assert min(v["iia_min"] for v in by.values()) <= metrics["iia_min"] + 1e-9
    assert min(v["siia_min"] for v in by.values()) <= metrics["siia_min"] + 1e-9
    assert all(v["worst_iia_node"] in metrics["iia_per_node"] for v in by.values())
    assert "by_shape" not in s.evaluator.evaluate(model)  # the padded copy alone

    result = train(case, config)
    final = result.metrics["by_shape"]
    nodes = {d["node"] for d in result.distractors}
    assert set(final) == set(SHAPES) and nodes
    assert all(v["worst_distractor"] in nodes and v["distractor_r2_min"] <= 1.0 for v in final.values())
