"""A compiled case -> fixed training / validation sets with high-level labels, and base/source pairs.

Data is drawn once (the input spaces are small) and labelled by the compiled high-level model,
which equals the RASP program (tested in rasp_programs). Pairs are redrawn every training step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from siit.config import Pairing
from siit.losses import targets_from_logits
from siit.transformer import Transformer


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Encoded sequences with the high-level model's labels and node activations."""

    tokens: torch.Tensor
    """long [N, n_ctx]: BOS, the input, PAD."""
    mask: torch.Tensor
    """long [N, n_ctx]: 1 on BOS and input positions."""
    lengths: torch.Tensor
    """long [N]: input lengths (BOS excluded)."""
    labels: torch.Tensor
    """[N, n_ctx]: class ids (long) or values (float) of the high-level output."""
    high_acts: torch.Tensor
    """[hl layers, N, n_ctx, hl heads + 1, hl d_model]: high-level node activations (sources)."""
    seqs: tuple[tuple[Any, ...], ...]
    """The raw input sequences."""

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def label_mask(self) -> torch.Tensor:
        """bool [N, n_ctx]: positions that carry a label (input positions: not BOS, not PAD)."""
        out = self.mask.bool().clone()
        out[:, 0] = False
        return out


def make_dataset(compiled: Any, high: Transformer, n: int, seed: int) -> Dataset:
    """n sequences from the case's sampler, encoded and labelled by the high-level model."""
    seqs = compiled.case.sample(n, seed)
    tokens, mask = compiled.encoding.encode(seqs)
    with torch.no_grad():
        logits, acts = high(tokens, mask, return_acts=True)
    return Dataset(
        tokens=tokens, mask=mask, lengths=mask.sum(1) - 1,
        labels=targets_from_logits(logits, compiled.case.task_kind), high_acts=acts,
        seqs=tuple(seqs),
    )


def pair_sources(lengths: torch.Tensor, bases: torch.Tensor, pairing: Pairing,
                 generator: torch.Generator) -> torch.Tensor:
    """A source index for every base index (see TrainConfig.pairing)."""
    n = lengths.shape[0]
    u = torch.rand(bases.shape[0], generator=generator, dtype=torch.float64)
    if pairing == "independent":
        return (u * n).long().clamp(max=n - 1)
    order = torch.argsort(lengths, stable=True)
    sorted_lengths = lengths[order]
    # first sorted position whose length is >= the base's length; draw uniformly from there on
    start = torch.searchsorted(sorted_lengths, lengths[bases])
    pick = start + (u * (n - start)).long()
    return order[pick.clamp(max=n - 1)]


def inert_high_nodes(data: Dataset, high: Transformer, high_masks: torch.Tensor, names: Sequence[str],
                     sources: torch.Tensor, task_kind: str) -> list[str]:
    """High-level nodes whose interchange from `sources` never changes the high-level output."""
    from siit.interventions import interchange

    inert = []
    with torch.no_grad():
        clean = targets_from_logits(high(data.tokens, data.mask)[0], task_kind)
        for name, node_mask in zip(names, high_masks):
            patched = targets_from_logits(
                interchange(high, data.tokens, data.mask, data.high_acts[:, sources], node_mask), task_kind)
            changed = (patched != clean) if task_kind == "classification" else (patched - clean).abs() > 1e-6
            if not changed[data.label_mask].any():
                inert.append(name)
    return inert


def resolve_pairing(pairing: Pairing, data: Dataset, high: Transformer, high_masks: torch.Tensor,
                    names: Sequence[str], task_kind: str, seed: int) -> Pairing:
    """"auto" -> source_not_shorter if every high-level node changes the high-level output on some
    training pair under it, else independent (see TrainConfig.pairing); other values unchanged."""
    if pairing != "auto":
        return pairing
    sources = pair_sources(data.lengths, torch.arange(len(data)), "source_not_shorter", step_generator(seed, -2))
    inert = inert_high_nodes(data, high, high_masks, names, sources, task_kind)
    return "independent" if inert else "source_not_shorter"


def step_generator(seed: int, step: int) -> torch.Generator:
    """The random stream of one training step: a function of (seed, step) only, so a resumed
    run draws exactly what an uninterrupted one would."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (2**63 - 1))


def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The order in which one epoch visits the training set."""
    gen = torch.Generator().manual_seed((seed * 7_919 + 104_729 * (epoch + 1)) % (2**63 - 1))
    return torch.randperm(n, generator=gen)
