"""Shared builders for the Appendix H catalogue cases (InterpBench Table 11).

Most Table 11 tasks are one function applied to every element; `map_case` builds those from the
function alone, so each case module stays a readable list of (number, name, description, function).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tracr.rasp import rasp

from rasp_programs.case import Case
from rasp_programs.helpers import categorical_map, make_length

INTS = tuple(range(10))  # default numeric vocabulary: single digits
SIGNED = tuple(range(-4, 5))  # for tasks about sign or absolute value
DECIMALS = 3  # real-valued outputs are rounded so that the output vocabulary has readable labels


def rounded(f: Callable[[Any], float]) -> Callable[[Any], float]:
    """f with its result rounded (a categorical output needs a finite, hashable value set)."""
    return lambda x: round(float(f(x)), DECIMALS)


def map_case(
    case_id: str, name: str, description: str, f: Callable[[Any], Any], *,
    vocab: tuple = INTS, label: str | None = None, notes: str = "", max_seq_len: int = 5,
) -> Case:
    """A classification case whose output at each position is f(token): one categorical Map."""
    outputs = {f(v) for v in vocab}
    if any(isinstance(o, float) and not math.isfinite(o) for o in outputs):
        raise ValueError(f"case {case_id}: f is not finite on the vocabulary")  # why: no NaN labels
    return Case(
        id=case_id, name=name, task_kind="classification", description=description,
        vocab=vocab, max_seq_len=max_seq_len, causal=True, notes=notes,
        build_program=lambda: categorical_map(f, rasp.tokens, label or name),
    )


def index_map_case(
    case_id: str, name: str, description: str, f: Callable[[Any, int], Any], *,
    vocab: tuple = INTS, notes: str = "", max_seq_len: int = 5,
) -> Case:
    """Output at position i is f(token_i, i): one categorical SequenceMap of tokens and indices."""
    return Case(
        id=case_id, name=name, task_kind="classification", description=description,
        vocab=vocab, max_seq_len=max_seq_len, causal=True, notes=notes,
        build_program=lambda: rasp.categorical(
            rasp.SequenceMap(f, rasp.tokens, rasp.indices)).named(name),
    )


def with_length(
    case_id: str, name: str, description: str, f: Callable[[Any, int, int], Any], *,
    vocab: tuple = INTS, notes: str = "", max_seq_len: int = 5,
) -> Case:
    """Output at position i is f(token_i, i, length): the length is counted by attention, then
    (index, length) and token are combined by two categorical SequenceMaps."""

    def program() -> rasp.SOp:
        length = make_length()
        where = rasp.categorical(
            rasp.SequenceMap(lambda i, n: (i, n), rasp.indices, length)).named("index_length")
        return rasp.categorical(
            rasp.SequenceMap(lambda t, p: f(t, p[0], p[1]), rasp.tokens, where)).named(name)

    return Case(
        id=case_id, name=name, task_kind="classification", description=description,
        vocab=vocab, max_seq_len=max_seq_len, causal=False, notes=notes, build_program=program,
    )


def gather_case(
    case_id: str, name: str, description: str, source: Callable[[int, int], int], *,
    vocab: tuple = INTS, notes: str = "", max_seq_len: int = 5, min_seq_len: int = 1,
    fill: Callable[[Any, int], Any] | None = None, needs_length: bool = True,
) -> Case:
    """Output at position i is the token at position source(i, length) (a permutation-like move):
    length by attention, the source index by an MLP, the token copied by a second attention.
    `fill(token, i)`, if given, post-processes the copied token (e.g. zero padding).
    needs_length=False: source ignores the length, which is then not computed (an unused length
    node would be in the graph yet change nothing: a false ground truth)."""

    def program() -> rasp.SOp:
        if needs_length:
            src = rasp.SequenceMap(source, rasp.indices, make_length())
        else:
            src = rasp.Map(lambda i: source(i, 0), rasp.indices)
        src = rasp.categorical(src).named("source_index")
        select = rasp.Select(rasp.indices, src, rasp.Comparison.EQ).named("source_select")
        moved = rasp.categorical(rasp.Aggregate(select, rasp.tokens)).named(
            name if fill is None else "moved")
        if fill is None:
            return moved
        return rasp.categorical(rasp.SequenceMap(fill, moved, rasp.indices)).named(name)

    return Case(
        id=case_id, name=name, task_kind="classification", description=description,
        vocab=vocab, max_seq_len=max_seq_len, min_seq_len=min_seq_len, causal=False,
        notes=notes, build_program=program,
    )
