"""A high-level task -> fixed training / validation sets with high-level labels, and base/source pairs.

Data is drawn once (the input spaces are small) and labelled by the high-level model
(siit.high_level: the compiled Tracr model, which equals the RASP program as tested in
rasp_programs, or a hand-written one). Pairs are redrawn every training step.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from typing import Any, Literal

import torch

from siit.config import Pairing
from siit.high_level import HighLevelModel, as_high_level, selection_rows
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
    """[*, N, n_ctx, ...]: the high-level model's node values (the IIT sources), batch on dim 1;
    for a compiled case its node activations [hl layers, N, n_ctx, hl heads + 1, hl d_model]."""
    seqs: tuple[tuple[Any, ...], ...]
    """The raw input sequences."""
    present: torch.Tensor | None = None
    """bool [N, n_ctx]: the positions each row keeps (see Transformer.forward); None: all, i.e.
    every row padded to n_ctx."""
    shape_ids: torch.Tensor | None = None
    """long [N]: index into SHAPES of the input shape each row stands for (None: all padded)."""

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device: torch.device) -> Dataset:
        """The same data with every tensor on `device` (itself where they are there already)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return dataclasses.replace(self, tokens=move(self.tokens), mask=move(self.mask),
                                   lengths=move(self.lengths), labels=move(self.labels),
                                   high_acts=move(self.high_acts), present=move(self.present),
                                   shape_ids=move(self.shape_ids))

    def take(self, rows: torch.Tensor | slice) -> Dataset:
        """The rows `rows` (long indices or a slice) of every tensor, in that order."""
        pick = lambda t: None if t is None else t[rows]  # noqa: E731
        index = range(len(self))[rows] if isinstance(rows, slice) else rows.tolist()
        return Dataset(tokens=self.tokens[rows], mask=self.mask[rows], lengths=self.lengths[rows],
                       labels=self.labels[rows], high_acts=self.high_acts[:, rows],
                       seqs=tuple(self.seqs[i] for i in index), present=pick(self.present),
                       shape_ids=pick(self.shape_ids))

    @property
    def label_mask(self) -> torch.Tensor:
        """bool [N, n_ctx]: positions that carry a label (input positions: not BOS, not PAD)."""
        out = self.mask.bool().clone()
        out[:, 0] = False
        return out


SHAPES = ("padded", "unpadded", "partly_padded")
"""How an input reaches the model: padded with PAD to n_ctx (with the attention mask), unpadded
(just BOS and the input), or padded to some length in between (as a batch padded to its longest
input is). Under causal attention the three compute the same at every real position; under
bidirectional attention PAD keys are attended (TransformerLens's rule), so they differ."""


def present_mask(lengths: torch.Tensor, n_ctx: int, pads_kept: torch.Tensor) -> torch.Tensor:
    """bool [N, n_ctx]: BOS, the input and the first `pads_kept` PAD positions of each row."""
    return torch.arange(n_ctx, device=lengths.device)[None, :] < (lengths + 1 + pads_kept)[:, None]


def random_shapes(lengths: torch.Tensor, n_ctx: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(long [N] PAD positions each row keeps, long [N] index into SHAPES of the shape drawn): none,
    all, or a uniform number in between, each shape with probability 1/3 (training sees every
    shape a user can feed). The drawn shape, not the PAD count, says which shape a row stands for:
    a full-length input keeps no PAD whatever was drawn."""
    n_pad = n_ctx - 1 - lengths
    u = torch.rand(lengths.shape[0], generator=generator, dtype=torch.float64)
    between = (torch.rand(lengths.shape[0], generator=generator, dtype=torch.float64) * (n_pad + 1)).long()
    kept = torch.where(u < 1 / 3, torch.zeros_like(n_pad), torch.where(u < 2 / 3, n_pad, between.clamp(max=n_pad)))
    shape = torch.where(u < 1 / 3, SHAPES.index("unpadded"), torch.where(u < 2 / 3, SHAPES.index("padded"),
                                                                          SHAPES.index("partly_padded")))
    return kept, shape


def with_shapes(data: Dataset, shapes: Sequence[str], generator: torch.Generator) -> Dataset:
    """The dataset repeated once per input shape (SHAPES), each copy with its `present` mask."""
    n, n_ctx = len(data), data.tokens.shape[1]
    n_pad = n_ctx - 1 - data.lengths
    kept = {"padded": n_pad, "unpadded": torch.zeros_like(n_pad),
            # at least one PAD and at least one fewer than all, where the input leaves room for that
            "partly_padded": torch.where(n_pad >= 2, 1 + (torch.rand(n, generator=generator, dtype=torch.float64)
                                                          * (n_pad - 1)).long(), n_pad)}
    k = len(shapes)
    rep = lambda x: x.repeat(k, *([1] * (x.dim() - 1)))  # noqa: E731
    return Dataset(
        tokens=rep(data.tokens), mask=rep(data.mask), lengths=rep(data.lengths), labels=rep(data.labels),
        high_acts=data.high_acts.repeat(1, k, *([1] * (data.high_acts.dim() - 2))),
        seqs=data.seqs * k,
        present=torch.cat([present_mask(data.lengths, n_ctx, kept[s]) for s in shapes]),
        shape_ids=torch.cat([torch.full((n,), SHAPES.index(s)) for s in shapes]),
    )


def make_dataset(task: Any, high: HighLevelModel | Transformer, n: int, seed: int) -> Dataset:
    """n sequences from the task's sampler, encoded and labelled by the high-level model
    (siit.high_level.HighLevelTask / HighLevelModel; a bare compiled Transformer is wrapped)."""
    seqs = task.case.sample(n, seed)
    tokens, mask = task.encoding.encode(seqs)
    labels, values = as_high_level(high, task.case.task_kind).run(tokens, mask)
    return Dataset(
        tokens=tokens, mask=mask, lengths=mask.sum(1) - 1, labels=labels, high_acts=values,
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


def inert_high_nodes(data: Dataset, high: HighLevelModel | Transformer, high_masks: torch.Tensor,
                     names: Sequence[str], sources: torch.Tensor, task_kind: str) -> list[str]:
    """High-level nodes whose interchange from `sources` never changes the high-level output.
    high_masks: one row per name, the `select` of a HighLevelModel (or, with a bare compiled
    Transformer, its slot masks [n, hl layers, hl heads + 1])."""
    if isinstance(high, Transformer):
        high, high_masks = as_high_level(high, task_kind, high_masks, names), selection_rows(len(names))
    inert = []
    with torch.no_grad():
        clean = high.run(data.tokens, data.mask)[0]
        for name, select in zip(names, high_masks):
            patched = high.interchange(data.tokens, data.mask, data.high_acts[:, sources], select)
            changed = (patched != clean) if task_kind == "classification" else (patched - clean).abs() > 1e-6
            if not changed[data.label_mask].any():
                inert.append(name)
    return inert


def source_length_weights(lengths: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """[max length + 1] weight per input length that makes the sources pair_sources draws count as
    the training inputs do: p(length) / p_source(length), 1 where every length is drawn evenly.

    source_not_shorter draws a source uniformly among the inputs at least as long as a uniform
    base, so sources run long (case 18: mean length 4.8 against 3.5); loudness measured on them
    is the loudness of long inputs, and busy nodes matched there were 13-33% too loud in variance
    on inputs of the sampler's own lengths."""
    counts = torch.bincount(lengths).to(torch.float64)
    if pairing == "independent":
        return torch.ones_like(counts, dtype=torch.float32)
    p = counts / counts.sum()
    tail = p.flip(0).cumsum(0).flip(0)  # P(length >= l)
    p_source_over_p = torch.where(p > 0, p / tail.clamp(min=1e-12), 0.0).cumsum(0)  # p_source(l) / p(l)
    return torch.where(p > 0, 1.0 / p_source_over_p.clamp(min=1e-12), 0.0).to(torch.float32)


def resolve_pairing(pairing: Pairing, data: Dataset, high: HighLevelModel | Transformer, high_masks: torch.Tensor,
                    names: Sequence[str], task_kind: str, seed: int) -> Pairing:
    """"auto" -> source_not_shorter if every high-level node changes the high-level output on some
    training pair under it, else independent (see TrainConfig.pairing); other values unchanged."""
    if pairing != "auto":
        return pairing
    sources = pair_sources(data.lengths, torch.arange(len(data)), "source_not_shorter", step_generator(seed, -2))
    inert = inert_high_nodes(data, high, high_masks, names, sources, task_kind)
    return "independent" if inert else "source_not_shorter"


def case_seed(seed: int, case_id: str) -> int:
    """The seed of the choices that must not repeat from case to case (which low-level heads form
    the circuit, which node gets which distractor, head rescale draws): with one seed for the whole
    zoo they would otherwise fall on the same heads in every entry, a pattern a method could learn."""
    return (seed * 1_000_003 + zlib.crc32(str(case_id).encode())) % (2**31 - 1)


def pool_seed(seed: int, pool: Literal["train", "validation"]) -> int:
    """The seed of a run's training or validation pool (make_dataset), from the run's seed: the two
    pools of a run, and the pools of runs with other seeds, never share a draw."""
    return 2 * seed + (1 if pool == "train" else 2)


def step_generator(seed: int, step: int) -> torch.Generator:
    """The random stream of one training step: a function of (seed, step) only, so a resumed
    run draws exactly what an uninterrupted one would."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (2**63 - 1))


def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The order in which one epoch visits the training set."""
    gen = torch.Generator().manual_seed((seed * 7_919 + 104_729 * (epoch + 1)) % (2**63 - 1))
    return torch.randperm(n, generator=gen)
