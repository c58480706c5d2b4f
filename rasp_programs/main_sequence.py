"""Cases that move information between positions (attention copies tokens):
InterpBench cases 13, 19, 21, 26."""

from __future__ import annotations

import numpy as np
from tracr.rasp import rasp

from rasp_programs.case import Case, InputSeq
from rasp_programs.helpers import categorical_map, count_earlier_equal, token_with_index

TREND_LEN = 5


def _trend(current: int, following: int) -> str:
    if following > current:
        return "increasing"
    return "decreasing" if following < current else "constant"


def case_13() -> Case:
    def program() -> rasp.SOp:
        # The last position compares with itself ("constant"): inputs have a fixed length so that
        # no position reads past the end, which Tracr would decode arbitrarily.
        nxt = rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == min(q + 1, TREND_LEN - 1))
        following = rasp.categorical(rasp.Aggregate(nxt.named("next_select"), rasp.tokens)).named("next_token")
        return rasp.categorical(rasp.SequenceMap(_trend, rasp.tokens, following)).named("trend")

    return Case(
        id="13", name="trend", task_kind="classification", strict_edges=True,
        description="Analyzes the trend of numeric tokens: whether the next token is higher "
        "('increasing'), lower ('decreasing') or equal ('constant'); the last token is 'constant'.",
        vocab=(0, 1, 2, 3), max_seq_len=TREND_LEN, min_seq_len=TREND_LEN, causal=False,
        build_program=program,
        notes="Fixed length 5 so that the last position has a defined successor (itself).",
    )


def _repeat_heavy_sampler(vocab: tuple, min_len: int, max_len: int):
    """Inputs with many repeats: each token repeats the previous one with probability 1/2."""

    def sample(rng: np.random.Generator, n: int) -> list[InputSeq]:
        out = []
        for k in rng.integers(min_len, max_len + 1, size=n):
            seq = [vocab[rng.integers(len(vocab))]]
            for _ in range(k - 1):
                seq.append(seq[-1] if rng.random() < 0.5 else vocab[rng.integers(len(vocab))])
            out.append(tuple(seq))
        return out

    return sample


def _keep_or_drop(token: str, count: int) -> str:
    return "_" if count > 0 else token


def case_19() -> Case:
    vocab = ("a", "b", "c")

    def program() -> rasp.SOp:
        pairs = token_with_index()
        repeats = count_earlier_equal(pairs, lambda k, q: k == q - 1, "same_as_previous")
        return rasp.categorical(rasp.SequenceMap(_keep_or_drop, rasp.tokens, repeats)).named("deduplicated")

    return Case(
        id="19", name="remove_consecutive_duplicates", task_kind="classification",
        description="Removes consecutive duplicate tokens: a token equal to the one before it is "
        "replaced by '_', every other token is kept.",
        vocab=vocab, max_seq_len=5, causal=True, build_program=program,
        sampler=_repeat_heavy_sampler(vocab, 1, 5),
    )


def case_21() -> Case:
    vocab = ("a", "b", "c", "d")

    def program() -> rasp.SOp:
        pairs = token_with_index()
        earlier = count_earlier_equal(pairs, lambda k, q: k < q, "earlier_occurrences")
        return rasp.categorical(rasp.SequenceMap(_keep_or_drop, rasp.tokens, earlier)).named("unique")

    return Case(
        id="21", name="unique_tokens", task_kind="classification",
        description="Extracts the unique tokens of a string: the first occurrence of each token is "
        "kept, later occurrences are replaced by '_'.",
        vocab=vocab, max_seq_len=5, causal=True, build_program=program,
        sampler=_repeat_heavy_sampler(vocab, 1, 5),
    )


def _cascade_source(i: int) -> int:
    """Position i of the cascade shows token k where k(k+1)/2 <= i < (k+1)(k+2)/2."""
    k = 0
    while (k + 1) * (k + 2) // 2 <= i:
        k += 1
    return k


def case_26() -> Case:
    def program() -> rasp.SOp:
        source = categorical_map(_cascade_source, rasp.indices, "cascade_source")
        select = rasp.Select(rasp.indices, source, rasp.Comparison.EQ).named("cascade_select")
        return rasp.categorical(rasp.Aggregate(select, rasp.tokens)).named("cascade")

    return Case(
        id="26", name="cascade", task_kind="classification", strict_edges=True,
        description="Creates a cascading effect by repeating each token incrementally: the first "
        "token once, the second twice, the third three times, ... (truncated to the input length).",
        vocab=("a", "b", "c"), max_seq_len=6, causal=True, build_program=program,
    )
