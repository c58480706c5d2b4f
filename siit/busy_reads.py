"""Busy nodes' distractors -> distractors that read what earlier busy heads compute (issue 32: busy work
that later components use).

Without this nothing reads a busy node's output: resampling a busy node moves no later node beyond the
incidental, while circuit nodes are read by the circuit, so whoever asks "what does anything downstream
use?" finds the circuit. Here each busy MLP's target (token_position: |feature - position code|) takes
as its feature the weighted sum of up to `reads` earlier busy heads' raw targets instead of a feature of
its own token: a previous token's feature or a running mean is at the MLP's position only in those
heads' outputs, and the absolute value is no linear map of them, so the MLP must read the heads'
directions and compute on them. Each busy head that copies a token's feature from `offset` back copies
instead the sum of earlier running-mean heads' values from there (it could also average the tokens
itself, and partly does: read_effect measures how much it reads). Strictness is untouched: every node
involved is outside the circuit, and the task never reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from eval.core.circuit import parse_node
from siit.correspondence import NodeLayout
from siit.distractors import Distractor
from siit.interventions import node_activations
from siit.transformer import Patch, Transformer

MAX_READS = 3
"""Most earlier busy heads one busy node reads (TrainConfig.distractor_reads)."""


def layer_of(node: str) -> int:
    """The block of a low-level node a{l}.h{h} or m{l}."""
    return parse_node(node).layer


MEAN_KINDS = ("running_mean",)
"""What a reading head copies: a running mean differs from position to position, so its value at `offset`
back is the source head's output there (a mean over the whole input, input_mean, is the same everywhere:
the reader could average the tokens itself)."""


def sources_for(reader: Distractor, distractors: Sequence[Distractor]) -> list[Distractor]:
    """The busy heads `reader` can read, among those whose targets vary at every position (a head that
    fires at one position, planted.large_circuit's, carries its feature nowhere else). An MLP
    (token_position): every head of its own block (a block's heads write before its MLP reads) or
    earlier. A head that copies from `offset` back (previous_token): the heads of earlier blocks that
    average a feature up to their position (MEAN_KINDS), whose value it copies from there; a copy of a copying
    head would be a token further back, which the reader could attend to itself. Other heads read none."""
    heads = [d for d in distractors if d.node.startswith("a") and d.at is None]
    if reader.kind == "token_position":
        return [d for d in heads if layer_of(d.node) <= layer_of(reader.node)]
    if reader.kind == "previous_token" and reader.at is None:
        return [d for d in heads if d.kind in MEAN_KINDS and layer_of(d.node) < layer_of(reader.node)]
    return []


def draw_reads(distractors: Sequence[Distractor], reads: int, seed: int) -> tuple[Distractor, ...]:
    """Each busy node reading up to `reads` of its sources_for: first the heads (whose sources read
    nothing), then the MLPs (whose sources may be heads that read). Drawn from streams of their own (so
    every other draw is unchanged; 0 returns the distractors as they are). Heads not yet read by another
    node are taken first, so that readers spread their reads over the heads. Each read weighs ±1/n (n the
    node's reads, signs drawn), so the sum stays within the range of one head's target."""
    if not 0 <= reads <= MAX_READS:
        raise ValueError(f"reads must be in [0, {MAX_READS}], got {reads}")
    if reads == 0:
        return tuple(distractors)
    read_by: dict[str, int] = {}
    out = list(distractors)
    for kind, stream in (("previous_token", 0x2EAD6), ("token_position", 0x2EAD5)):
        rng = np.random.default_rng([seed, stream])
        sources = list(out)  # the MLPs' sources carry the reads the heads drew
        for i, d in enumerate(out):
            pool = sources_for(d, sources) if d.kind == kind else []
            if pool:
                out[i] = _with_reads(d, pool, reads, read_by, rng)
    return tuple(out)


def _with_reads(d: Distractor, pool: list[Distractor], reads: int, read_by: dict[str, int],
                rng: np.random.Generator) -> Distractor:
    """d reading up to `reads` of `pool`, the least-read first (ties in a drawn order); counts them."""
    order = rng.permutation(len(pool))
    picked = sorted(order, key=lambda i: read_by.get(pool[i].node, 0))[:reads]  # stable: ties keep the draw
    chosen = tuple(pool[i] for i in picked)
    for c in chosen:
        read_by[c.node] = read_by.get(c.node, 0) + 1
    signs = rng.choice([-1.0, 1.0], size=len(chosen))
    return dataclasses.replace(d, reads=chosen, read_weights=tuple(float(s) / len(chosen) for s in signs))


def read_effect(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, reader: str, z: torch.Tensor,
                resampled: Sequence[str], seed: int = 0) -> float:
    """How much the node `reader` uses the nodes `resampled`: the mean squared change of the
    least-squares readout of its output onto its standardised target z [B, T] when those nodes take
    another row's outputs (rows permuted with `seed`), over z's variance, at input positions (tokens,
    mask [B, T]). 2 for a node whose target those nodes alone determine and which reads them exactly
    (the readout of an independent copy of its target); near 0 for one that does not read them."""
    real = mask.bool().clone()
    real[:, 0] = False  # BOS: a causal target is constant there
    layout = NodeLayout(model.n_layers, model.n_heads)
    layer, slot = layout.slot(reader)
    acts = node_activations(model, tokens, mask)
    ones = torch.ones(int(real.sum()), 1, dtype=torch.float64)
    x = torch.cat([acts[layer, :, :, slot][real].double(), ones], 1)  # [P, d + 1]
    coef = torch.linalg.lstsq(x, z[real].double()[:, None]).solution
    which = torch.zeros(tokens.shape[0], model.n_layers, model.n_heads + 1, dtype=torch.bool)
    for node in resampled:
        which[(slice(None), *layout.slot(node))] = True
    perm = torch.randperm(tokens.shape[0], generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        _, patched = model(tokens, mask, Patch(mask=which, values=acts[:, perm]), return_acts=True)
    xp = torch.cat([patched[layer, :, :, slot][real].double(), ones], 1)
    return float(((xp - x) @ coef).pow(2).mean() / z[real].double().var())
