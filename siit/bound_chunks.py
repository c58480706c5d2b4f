"""The bounds' fresh sample -> chunks of its rows, each with its rows' and their sources' activations,
and the sample's mean activations, so that a bound's memory follows a chunk, not the sample.

siit.effect_bounds and siit.edge_bounds patch every out-of-circuit node or edge on BOUND_N sequences
per length. On planted large-circuit (99 heads, d_model 198, lengths 3-13) that sample is 3,300
sequences, whose node activations [L, N, T, H + 1, d] are 3.7 GB; with their resampled copy and the
edge bound's sender differences (one per ablation) the final validation was OOM-killed at 20.8 GB.
Every cell of both bounds is a function of a row and its source row (resample) or of the sample's
mean (mean ablation), so each chunk runs its rows and their sources alone, and the means are summed
over the chunks first. A sample whose activations fit siit.interventions.MAX_SAMPLE_ELEMENTS is one chunk, computed as
before the chunks existed (the same tensors, so the same validation.json for every earlier entry).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from siit.data import Dataset
from siit.interventions import ablation_values, chunk_rows, node_activations, row_slices
from siit.metrics import Evaluator
from siit.transformer import Transformer

@dataclasses.dataclass(frozen=True)
class Chunk:
    """Rows `rows` of a bound sample with what patching them needs."""

    rows: slice
    """The chunk's rows of the sample (contiguous)."""
    ev: Evaluator
    """The sample's evaluator restricted to `rows`: its patched runs read `source_acts`, never its own
    pairing (pass them explicitly)."""
    acts: torch.Tensor
    """[L, n, T, H + 1, d]: the rows' clean node activations."""
    sources: Dataset
    """The rows' resample sources (the sample's `ev.sources[rows]`), row by row."""
    source_acts: torch.Tensor
    """[L, n, T, H + 1, d]: the sources' clean node activations."""


@dataclasses.dataclass(frozen=True)
class SampleMeans:
    """The sample's mean ablation values (siit.interventions.ablation_values' mean, per position over the
    rows where it is a real token)."""

    acts: torch.Tensor
    """[L, 1, T, H + 1, d]: every node's mean output."""
    embedding: torch.Tensor
    """[1, T, d]: the input's (embedding) mean."""


def sample_chunks(model: Transformer, ev: Evaluator, per_chunk: int | None = None) -> Iterator[Chunk]:
    """The sample of `ev` in chunks of `per_chunk` rows (default chunk_rows), in order; one chunk, the
    evaluator itself, when the sample fits."""
    d = ev.data
    n = len(d)
    per_chunk = chunk_rows(model, d.tokens.shape[1]) if per_chunk is None else per_chunk
    if per_chunk >= n:
        acts = node_activations(model, d.tokens, d.mask, d.present)
        yield Chunk(rows=slice(0, n), ev=ev, acts=acts, sources=d.take(ev.sources), source_acts=acts[:, ev.sources])
        return
    for rows in row_slices(n, per_chunk):
        part, sources = d.take(rows), d.take(ev.sources[rows])
        sub = dataclasses.replace(ev, data=part, sources=torch.arange(len(part), device=ev.sources.device),
                                  iit_targets=ev.iit_targets[:, rows] if ev.iit_targets.dim() > 1 else ev.iit_targets,
                                  edge_sources=None)
        yield Chunk(rows=rows, ev=sub, acts=node_activations(model, part.tokens, part.mask, part.present),
                    sources=sources, source_acts=node_activations(model, sources.tokens, sources.mask, sources.present))


def sample_means(model: Transformer, ev: Evaluator, per_chunk: int | None = None) -> SampleMeans:
    """The mean ablation values over `ev`'s whole sample, summed chunk by chunk (as sample_chunks splits
    it; one chunk: ablation_values itself)."""
    d = ev.data
    n = len(d)
    per_chunk = chunk_rows(model, d.tokens.shape[1]) if per_chunk is None else per_chunk
    with torch.no_grad():
        if per_chunk >= n:
            acts = node_activations(model, d.tokens, d.mask, d.present)
            embedding = model.input_embedding(d.tokens, d.mask)
            return SampleMeans(acts=ablation_values(acts, d.mask, "mean"),
                               embedding=ablation_values(embedding[None, :, :, None], d.mask, "mean")[0, :, :, 0])
        acts_sum = embedding_sum = None
        count = torch.zeros(1, d.tokens.shape[1], device=d.tokens.device)
        for rows in row_slices(n, per_chunk):
            part = d.take(rows)
            weight = part.mask.to(torch.float32)  # [n, T]: 1 where the position is a real token
            acts = node_activations(model, part.tokens, part.mask, part.present)
            a = (acts * weight[None, :, :, None, None]).sum(dim=1, keepdim=True)
            e = (model.input_embedding(part.tokens, part.mask) * weight[:, :, None]).sum(dim=0, keepdim=True)
            acts_sum = a if acts_sum is None else acts_sum + a
            embedding_sum = e if embedding_sum is None else embedding_sum + e
            count += weight.sum(dim=0, keepdim=True)
        count = count.clamp(min=1.0)
        return SampleMeans(acts=acts_sum / count[None, :, :, None, None], embedding=embedding_sum / count[:, :, None])
