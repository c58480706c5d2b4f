"""The bounds' sample in chunks of rows (siit.bound_chunks, issue 36): a wide model's bound sample does
not fit in memory whole (planted large-circuit's final validation was OOM-killed at 20.8 GB), so the
node and edge bounds run it chunk by chunk, each chunk with its rows' resample sources, and the mean
ablation reads the whole sample's mean. Chunked or whole, the bounds must be the same: checked on a
random model whose out-of-circuit nodes and edges move many outputs, in every input shape."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import siit.interventions as interventions
from siit.bound_chunks import sample_chunks, sample_means
from siit.edge_bounds import edge_bounds, edge_changes
from siit.edges import EdgeLayout
from siit.effect_bounds import _changes, bound_evaluator, effect_bounds
from siit.high_level import as_task
from siit.interventions import ablation_values, chunk_rows, node_activations
from test_effect_bounds import case_33  # noqa: F401  (the fixture: case 33, its setup, a random model)

SHAPES = ["padded", "unpadded", "partly_padded"]


@pytest.fixture(scope="module")
def sample(case_33):
    cc, setup, model = case_33
    return model, bound_evaluator(setup.final_evaluator, as_task(cc), 12, 4, SHAPES)


def test_chunks_cover_the_sample_in_order_with_each_rows_sources(sample):
    model, ev = sample
    d = ev.data
    chunks = list(sample_chunks(model, ev, per_chunk=17))
    assert len(chunks) == -(-len(d) // 17) > 1
    assert [c.rows.start for c in chunks] == list(range(0, len(d), 17)) and chunks[-1].rows.stop == len(d)
    whole = node_activations(model, d.tokens, d.mask, d.present)
    for c in chunks:
        assert torch.equal(c.ev.data.tokens, d.tokens[c.rows]) and torch.equal(c.ev.data.present, d.present[c.rows])
        assert torch.equal(c.sources.tokens, d.tokens[ev.sources[c.rows]])
        torch.testing.assert_close(c.acts, whole[:, c.rows], rtol=0, atol=1e-5)
        torch.testing.assert_close(c.source_acts, whole[:, ev.sources[c.rows]], rtol=0, atol=1e-5)
    one = list(sample_chunks(model, ev))  # a sample this small fits: the evaluator itself, one chunk
    assert len(one) == 1 and one[0].ev is ev and torch.equal(one[0].source_acts, one[0].acts[:, ev.sources])


def test_the_streamed_mean_is_the_sample_mean(sample):
    model, ev = sample
    d = ev.data
    acts = node_activations(model, d.tokens, d.mask, d.present)
    whole = sample_means(model, ev)
    assert torch.equal(whole.acts, ablation_values(acts, d.mask, "mean"))
    chunked = sample_means(model, ev, per_chunk=17)
    torch.testing.assert_close(chunked.acts, whole.acts, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked.embedding, whole.embedding, rtol=1e-5, atol=1e-5)
    real = d.mask.float()[:, :, None]
    embedding = model.input_embedding(d.tokens, d.mask)
    torch.testing.assert_close(whole.embedding[0], (embedding * real).sum(0) / real.sum(0).clamp(min=1.0))


def test_node_changes_chunked_equal_the_whole_sample(sample):
    model, ev = sample
    outside = list(ev.correspondence.non_aligned)
    whole = _changes(model, ev, outside)
    for per_chunk in (1, 17, 50):
        chunked = _changes(model, ev, outside, per_chunk=per_chunk)
        for kind in whole:
            assert whole[kind].any()  # not vacuous: the random model's nodes move outputs
            assert torch.equal(chunked[kind], whole[kind]), (kind, per_chunk)


def test_edge_changes_chunked_equal_the_whole_sample(sample):
    model, ev = sample
    edges = EdgeLayout(model.n_layers, model.n_heads).valid().nonzero()
    edges = edges[torch.randperm(edges.shape[0], generator=torch.Generator().manual_seed(2))[:16]]
    whole = edge_changes(model, ev, edges, ("resample", "mean"))
    chunked = edge_changes(model, ev, edges, ("resample", "mean"), per_chunk=17)
    for kind in whole:
        assert whole[kind].any()
        assert torch.equal(chunked[kind], whole[kind]), kind


def test_the_sections_are_the_same_when_memory_forces_chunks(case_33, monkeypatch):
    """effect_bounds and edge_bounds end to end: a chunk budget of a few rows gives the same sections."""
    cc, setup, model = case_33
    whole = effect_bounds(model, setup.final_evaluator, cc, n=20), edge_bounds(model, setup.final_evaluator, cc, n=20)
    per_row = model.n_layers * setup.final_evaluator.data.tokens.shape[1] * (model.n_heads + 1) * model.d_model
    monkeypatch.setattr(interventions, "MAX_SAMPLE_ELEMENTS", 13 * per_row)
    assert chunk_rows(model, setup.final_evaluator.data.tokens.shape[1]) == 13
    chunked = effect_bounds(model, setup.final_evaluator, cc, n=20), edge_bounds(model, setup.final_evaluator, cc, n=20)
    assert whole[0]["max_effect"] > 0 and whole[1]["max_effect"] > 0
    assert chunked == whole


def test_only_a_sample_wider_than_the_budget_is_chunked():
    """Every planted model before large-circuit has its bound sample whole (the same validation.json as
    before the chunks); large-circuit's (3,300 sequences of a 100-component, d_model-198 model) is not."""
    from planted.registry import get_planted, planted_names
    from siit.config import ArchConfig

    chunked = []
    for name in planted_names():
        task = as_task(get_planted(name))
        c, case = task.low_level_config(ArchConfig()), task.case
        shapes = 1 if c["attention_dir"] == "causal" else len(SHAPES)
        n = 300 * (case.max_seq_len - case.min_seq_len + 1) * shapes
        shape = SimpleNamespace(n_layers=c["n_layers"], n_heads=c["n_heads"], d_model=c["d_model"])
        if n > chunk_rows(shape, c["n_ctx"]):
            chunked.append(name)
    assert chunked == ["large-circuit"]
