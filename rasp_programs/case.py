"""A `Case`: one task with its RASP program, vocabulary, lengths and seeded input sampler.

rasp_programs.lookup turns a case id (an InterpBench number, a generated name or
`package.module:function`) into its Case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from eval.core.circuit import TaskKind

Value = Any  # a vocabulary or output value: str, int, float or bool
InputSeq = tuple  # one input sequence (without BOS), tuple of vocabulary values
Sampler = Callable[[np.random.Generator, int], list[InputSeq]]

BOS = "BOS"
PAD = "PAD"


class CaseError(ValueError):
    """A case id that names no case, or a case that is not well formed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    """One task of the zoo: a RASP program and the data it is judged on."""

    id: str
    """InterpBench's case number ("33") or the `package.module:function` that made the case."""
    name: str
    """Short snake_case name of the task, e.g. "token_length_parity"."""
    description: str
    """What the program computes, in one or two sentences (the task specification)."""
    task_kind: TaskKind
    """"classification" (categorical output, argmax) or "regression" (one numerical output)."""
    vocab: tuple[Value, ...]
    """Input vocabulary in a fixed order; must not contain BOS or PAD."""
    max_seq_len: int
    """Longest input the compiled model accepts (BOS excluded)."""
    min_seq_len: int = 1
    """Shortest input the sampler draws."""
    causal: bool = False
    """Compile with a causal attention mask (the program only looks at earlier positions)."""
    build_program: Callable[[], Any]
    """Returns the RASP program (a `tracr.rasp.rasp.SOp`); built on demand so listing is cheap."""
    sampler: Sampler | None = None
    """`sampler(rng, n)` -> n input sequences; default: uniform length, uniform tokens."""
    notes: str = ""
    """Why the program is written as it is (e.g. a rewrite that avoids a Tracr miscompilation)."""
    family: Literal["case", "planted"] = "case"
    """"case": a RASP program; "planted": the task of a hand-written high-level model (package
    `planted`), which has no RASP program (build_program raises)."""
    corruption: str = "resample"
    """The counterfactuals circuit methods are given unless told otherwise (eval.core.corruption):
    `resample`, an independent draw (what SIIT trains with), or `token:K`, the clean input with its K-th
    token replaced; a distribution-shift entry names the corruption its methods are judged under."""
    strict_edges: bool = False
    """Train with edge-level strictness unless told otherwise (`zoo train --no-strict-edges`): on for
    the main cases where it meets its criterion at the default width, so their edge labels are proven
    per input length, not only reported (docs/results.md, "Per input length"); a training default,
    not part of the task (case.json leaves it out)."""
    min_d_head: int | None = None
    """Smallest head width of the trained model unless told otherwise (`zoo train --min-d-head`), or None:
    siit.config.ArchConfig's. 8 for cases 3 and 4, whose edge-level strictness meets its criterion at d_model
    32 only (docs/results.md); a training default like strict_edges, not part of the task."""

    def __post_init__(self) -> None:
        if self.min_d_head is not None and not (isinstance(self.min_d_head, int) and self.min_d_head >= 1):
            raise CaseError(f"case {self.id}: min_d_head must be a positive integer or None")
        if self.task_kind not in ("classification", "regression"):
            raise CaseError(f"case {self.id}: task_kind must be classification or regression")
        if not self.vocab:
            raise CaseError(f"case {self.id}: empty vocabulary")
        if len(set(self.vocab)) != len(self.vocab):
            raise CaseError(f"case {self.id}: vocabulary has duplicates")
        if BOS in self.vocab or PAD in self.vocab:
            raise CaseError(f"case {self.id}: vocabulary must not contain {BOS!r} or {PAD!r}")
        if not 1 <= self.min_seq_len <= self.max_seq_len:
            raise CaseError(f"case {self.id}: need 1 <= min_seq_len <= max_seq_len")
        if self.family not in ("case", "planted"):
            raise CaseError(f"case {self.id}: family must be case or planted")
        if self.corruption != "resample":  # a token corruption must fit the case (eval.core.corruption)
            from eval.core.corruption import CorruptionError, check_corruption

            try:
                check_corruption(self, self.corruption)
            except CorruptionError as exc:
                raise CaseError(f"case {self.id}: {exc}") from None

    @property
    def program(self) -> Any:
        """The RASP program (built fresh: RASP expressions carry unique ids and labels)."""
        return self.build_program()

    @property
    def entry_name(self) -> str:
        """Name of the zoo entry: `case-33`, `case-mypkg.mymod-make_case` for an outside case,
        `planted-causal-bench-4x4` for a planted model."""
        return f"{self.family}-" + self.id.replace(":", "-")

    def sample(self, n: int, seed: int) -> list[InputSeq]:
        """n input sequences drawn reproducibly from `seed`."""
        rng = np.random.default_rng(seed)
        sampler = self.sampler or uniform_sampler(self.vocab, self.min_seq_len, self.max_seq_len)
        seqs = sampler(rng, n)
        for seq in seqs:
            if not self.min_seq_len <= len(seq) <= self.max_seq_len:
                raise CaseError(f"case {self.id}: sampler returned a sequence of length {len(seq)}")
        return [tuple(s) for s in seqs]

    def evaluate(self, seq: Sequence[Value]) -> list[Value]:
        """The program's output on one input, by RASP's own interpreter (the reference)."""
        from tracr.rasp import rasp

        return list(rasp.evaluate(self.program, list(seq)))

    def metadata(self) -> dict[str, Any]:
        """JSON-native description of the case (written as case.json)."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "task_kind": self.task_kind,
            "vocab": list(self.vocab),
            "max_seq_len": self.max_seq_len,
            "min_seq_len": self.min_seq_len,
            "causal": self.causal,
            "bos": BOS,
            "pad": PAD,
            "notes": self.notes,
        } | ({"family": "planted"} if self.family == "planted" else {}) \
            | ({"corruption": self.corruption} if self.corruption != "resample" else {})


def uniform_sampler(vocab: Sequence[Value], min_len: int, max_len: int) -> Sampler:
    """Length uniform in [min_len, max_len], each token uniform over the vocabulary."""
    vocab = list(vocab)

    def sample(rng: np.random.Generator, n: int) -> list[InputSeq]:
        lengths = rng.integers(min_len, max_len + 1, size=n)
        return [tuple(vocab[i] for i in rng.integers(0, len(vocab), size=k)) for k in lengths]

    return sample
