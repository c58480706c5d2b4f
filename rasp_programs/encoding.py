"""Token ids <-> task values for a compiled case: BOS first, PAD after the input, decode outputs.

Every batch is padded to n_ctx = max_seq_len + 1 so that activations of different batches line up
(interchange interventions patch position by position). Padding is masked out of attention.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from eval.core.circuit import TaskKind
from rasp_programs.case import BOS, PAD, Value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Encoding:
    """How a compiled case turns input sequences into token ids and logits back into values."""

    input_vocab: tuple[Value, ...]
    """Token id i encodes input_vocab[i]; contains BOS and PAD (their ids follow tracr's order)."""
    output_vocab: tuple[Value, ...] | None
    """Classification: logit column j decodes to output_vocab[j]. Regression: None."""
    max_seq_len: int
    """Longest input without BOS; token tensors have max_seq_len + 1 positions."""
    task_kind: TaskKind
    """"classification" or "regression"."""

    def __post_init__(self) -> None:
        if BOS not in self.input_vocab or PAD not in self.input_vocab:
            raise ValueError("input vocabulary must contain BOS and PAD")
        if (self.output_vocab is None) != (self.task_kind == "regression"):
            raise ValueError("output_vocab is required exactly for classification")

    @property
    def bos_id(self) -> int:
        return self.input_vocab.index(BOS)

    @property
    def pad_id(self) -> int:
        return self.input_vocab.index(PAD)

    @property
    def n_ctx(self) -> int:
        return self.max_seq_len + 1

    def encode(self, seqs: Sequence[Sequence[Value]]) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [batch, n_ctx] long and attention mask [batch, n_ctx] (1 = real token)."""
        index = {v: i for i, v in enumerate(self.input_vocab)}
        tokens = np.full((len(seqs), self.n_ctx), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), self.n_ctx), dtype=np.int64)
        for row, seq in enumerate(seqs):
            if len(seq) > self.max_seq_len:
                raise ValueError(f"input of length {len(seq)} exceeds max_seq_len {self.max_seq_len}")
            try:
                ids = [index[v] for v in seq]
            except KeyError as exc:
                raise ValueError(f"token {exc.args[0]!r} is not in the vocabulary") from None
            tokens[row, 0] = self.bos_id
            tokens[row, 1 : len(seq) + 1] = ids
            mask[row, : len(seq) + 1] = 1
        return torch.from_numpy(tokens), torch.from_numpy(mask)

    def decode(self, logits: torch.Tensor, lengths: Sequence[int]) -> list[list[Value]]:
        """Output values per sequence from logits [batch, n_ctx, d_vocab_out], BOS and PAD dropped."""
        if self.task_kind == "regression":
            values = logits[..., 0].detach().cpu().numpy()
            return [[float(v) for v in values[i, 1 : n + 1]] for i, n in enumerate(lengths)]
        ids = logits.argmax(dim=-1).cpu().numpy()
        assert self.output_vocab is not None
        return [[self.output_vocab[j] for j in ids[i, 1 : n + 1]] for i, n in enumerate(lengths)]

    def to_json(self) -> dict[str, Any]:
        return {
            "input_vocab": list(self.input_vocab),
            "output_vocab": None if self.output_vocab is None else list(self.output_vocab),
            "max_seq_len": self.max_seq_len,
            "task_kind": self.task_kind,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Encoding:
        out = data["output_vocab"]
        return cls(
            input_vocab=tuple(data["input_vocab"]),
            output_vocab=None if out is None else tuple(out),
            max_seq_len=int(data["max_seq_len"]),
            task_kind=data["task_kind"],
        )
