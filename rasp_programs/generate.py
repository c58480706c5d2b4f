"""Random RASP programs from a seed: held-out cases that no circuit-discovery method was tuned to.

A generated case is named `gen-{seed}-{index}`: draw `index` of the stream `seed`, sampled from
`numpy.random.default_rng([seed, index])`, so the name alone rebuilds the program without
replaying earlier draws. Settings that differ from GeneratorConfig's defaults are appended as
codes, each `.` + letter + value, in a fixed order and only when non-default (one name per case):
`gen-7-12.L3-4.V6` is draw 12 of seed 7 with 3-4 layers and 6 tokens. Codes: L layers (lo-hi),
W width, M mix (one digit per OP_KINDS entry), V vocab size, T tokens (l letters, d digits),
S lengths (min-max), O output (a any, c classification, r regression). A name means the same
program for as long as SAMPLER_VERSION is unchanged.

Programs are built directly as RASP objects (no source code is generated or evaluated). Operations
are typed so that Tracr compiles them exactly (REFERENCE.md): Maps are lookup tables over the
input's finite value set; a SequenceMap combines two categorical SOps; a categorical Aggregate
copies from exactly one position (key index = a function of the query index that never exceeds
it), so no value is averaged and none is missing; a numerical Aggregate averages a 0/1 indicator;
numerical values are only averaged or combined linearly (never mapped: Tracr discretises a map of
a mean on an assumed value set). Whether a draw is kept is decided in rasp_programs.generate_check.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

import numpy as np

from rasp_programs.case import Case, CaseError
from rasp_programs.generate_ops import OP_KINDS, GenerationFailed, OpKind, Sampled, sample_program

TokenKind = Literal["letters", "digits"]
OutputKind = Literal["any", "classification", "regression"]
PREFIX = "gen-"
SAMPLER_VERSION = 1
"""Bump when a change to the sampler changes what an existing name draws (the version is written in
every generated case's notes, so an entry records which sampler its name meant)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeneratorConfig:
    """What `zoo generate` draws. Defaults give the short names `gen-{seed}-{index}`."""

    layers: tuple[int, int] = (2, 4)
    """Inclusive range of compiled layers; each draw aims at one count in it, and a program whose
    compiled model has another count is rejected."""
    width: int = 2
    """Most attention heads in one layer of the compiled model (how many branches run side by side)."""
    mix: tuple[int, ...] = (3, 2, 2, 1, 2, 1)
    """Relative weight (0-9, 0 = never) of each operation kind, in OP_KINDS order: map,
    sequence_map, aggregate, numerical_aggregate, selector_width, linear_sequence_map."""
    vocab_size: int = 4
    """Number of input tokens."""
    tokens: TokenKind = "letters"
    """Input tokens: "letters" (a, b, ...) or "digits" (0, 1, ...)."""
    seq_len: tuple[int, int] = (1, 5)
    """Inclusive range of input lengths; the upper end is the compiled model's max_seq_len."""
    output: OutputKind = "any"
    """Task kind of the program's output: "classification" (categorical), "regression"
    (numerical) or "any" (regression with the numerical operations' share of the mix)."""

    def __post_init__(self) -> None:
        lo, hi = self.layers
        if not 1 <= lo <= hi <= 8:
            raise CaseError(f"layers must be a range within 1-8, got {lo}-{hi}")
        if not 1 <= self.width <= 8:
            raise CaseError(f"width must be 1-8, got {self.width}")
        if len(self.mix) != len(OP_KINDS) or not all(isinstance(w, int) and 0 <= w <= 9 for w in self.mix):
            raise CaseError(f"mix needs {len(OP_KINDS)} weights 0-9 ({', '.join(OP_KINDS)}), got {self.mix}")
        if sum(map(self.weight, ("map", "sequence_map", "aggregate", "selector_width"))) == 0:
            raise CaseError("mix must give some weight to map, sequence_map, aggregate or selector_width")
        if sum(map(self.weight, ("aggregate", "numerical_aggregate", "selector_width"))) == 0:
            raise CaseError("mix must give some weight to aggregate, numerical_aggregate or selector_width "
                            "(every kept circuit has an attention head)")
        if self.output == "regression" and self.weight("numerical_aggregate") == 0:
            raise CaseError("a regression output needs numerical_aggregate in the mix")
        if self.tokens not in ("letters", "digits") or self.output not in ("any", "classification", "regression"):
            raise CaseError("tokens must be letters or digits; output any, classification or regression")
        if not 2 <= self.vocab_size <= (26 if self.tokens == "letters" else 50):
            raise CaseError(f"vocab_size must be 2-{26 if self.tokens == 'letters' else 50}, got {self.vocab_size}")
        if not 1 <= self.seq_len[0] <= self.seq_len[1] <= 10:
            raise CaseError(f"lengths must be a range within 1-10, got {self.seq_len[0]}-{self.seq_len[1]}")

    def weight(self, kind: OpKind) -> int:
        return self.mix[OP_KINDS.index(kind)]

    @property
    def vocab(self) -> tuple[Any, ...]:
        if self.tokens == "letters":
            return tuple("abcdefghijklmnopqrstuvwxyz"[: self.vocab_size])
        return tuple(range(self.vocab_size))

    def codes(self) -> str:
        """The name suffix for the settings that differ from the defaults ('' for defaults)."""
        default, out = GeneratorConfig(), []
        for letter, field, text in _CODES:
            if getattr(self, field) != getattr(default, field):
                out.append(f".{letter}{text(getattr(self, field))}")
        return "".join(out)


_CODES: tuple[tuple[str, str, Any], ...] = (
    ("L", "layers", lambda r: f"{r[0]}-{r[1]}"),
    ("W", "width", str),
    ("M", "mix", lambda m: "".join(map(str, m))),
    ("V", "vocab_size", str),
    ("T", "tokens", lambda t: t[0]),
    ("S", "seq_len", lambda r: f"{r[0]}-{r[1]}"),
    ("O", "output", lambda o: o[0]),
)
_PARSE: dict[str, tuple[str, str, Any]] = {
    "L": ("layers", r"(\d)-(\d)", lambda m: (int(m[1]), int(m[2]))),
    "W": ("width", r"(\d)", lambda m: int(m[1])),
    "M": ("mix", r"(\d{%d})" % len(OP_KINDS), lambda m: tuple(int(c) for c in m[1])),
    "V": ("vocab_size", r"(\d{1,2})", lambda m: int(m[1])),
    "T": ("tokens", r"([ld])", lambda m: {"l": "letters", "d": "digits"}[m[1]]),
    "S": ("seq_len", r"(\d{1,2})-(\d{1,2})", lambda m: (int(m[1]), int(m[2]))),
    "O": ("output", r"([acr])", lambda m: {"a": "any", "c": "classification", "r": "regression"}[m[1]]),
}
_NAME = re.compile(r"gen-(0|[1-9]\d{0,9})-(0|[1-9]\d{0,9})((?:\.[A-Z][0-9a-z-]*)*)")
NAME_FORMAT = "gen-SEED-INDEX[.CODES], e.g. gen-0-3 or gen-7-12.L3-4.V6"


def case_name(seed: int, index: int, config: GeneratorConfig = GeneratorConfig()) -> str:
    """The name that rebuilds draw `index` of stream `seed` under `config`."""
    return f"{PREFIX}{seed}-{index}{config.codes()}"


def parse_name(name: str) -> tuple[int, int, GeneratorConfig]:
    """(seed, index, config) of a generated case's name; CaseError (one line) if malformed."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise CaseError(f"bad generated case name {name!r}: expected {NAME_FORMAT}")
    fields: dict[str, Any] = {}
    for code in match[3].split(".")[1:]:
        letter, text = code[0], code[1:]
        if letter not in _PARSE:
            raise CaseError(f"bad generated case name {name!r}: unknown code {letter!r} (known: {''.join(_PARSE)})")
        field, pattern, convert = _PARSE[letter]
        value = re.fullmatch(pattern, text)
        if value is None or field in fields:
            raise CaseError(f"bad generated case name {name!r}: malformed or repeated code {code!r}")
        fields[field] = convert(value)
    config = GeneratorConfig(**fields)
    seed, index = int(match[1]), int(match[2])
    canonical = case_name(seed, index, config)
    if canonical != name:  # defaults spelled out, or codes out of order: one name per case
        raise CaseError(f"generated case name {name!r} is not canonical; use {canonical!r}")
    return seed, index, config


def generated_case(name: str) -> Case:
    """The Case a generated name stands for (not checked: see generate_check.check_case)."""
    seed, index, config = parse_name(name)
    try:  # draw once to learn the task kind and shape; build_program redraws (fresh RASP objects)
        first = sample(config, seed, index)
    except GenerationFailed as exc:
        raise CaseError(f"generated case {name}: {exc}") from None
    kind = "regression" if first.numerical else "classification"
    return Case(
        id=name, name=f"gen_{seed}_{index}", task_kind=kind,
        description=f"Random RASP program (seed {seed}, draw {index}): {first.n_ops} operations, "
        f"{kind} output. {first.summary}",
        vocab=config.vocab, min_seq_len=config.seq_len[0], max_seq_len=config.seq_len[1],
        causal=False, build_program=lambda: sample(config, seed, index).program,
        notes=f"Generated by rasp_programs.generate (sampler version {SAMPLER_VERSION}) from its name "
        "alone; kept by `zoo generate` only "
        "if it compiles, equals rasp.evaluate, has no inert circuit node and is not all circuit. "
        "Non-causal: selectors may look ahead.",
    )


def sample(config: GeneratorConfig, seed: int, index: int) -> Sampled:
    """Draw `index` of stream `seed`: its random numbers are a function of (seed, index) only."""
    return sample_program(
        np.random.default_rng([seed, index]), layers=config.layers, width=config.width,
        weights=dict(zip(OP_KINDS, config.mix)), vocab=config.vocab, max_seq_len=config.seq_len[1],
        output=config.output)
