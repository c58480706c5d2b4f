"""Cases that count or average over positions (attention does the counting):
InterpBench cases 3, 4, 11, 18, 20."""

from __future__ import annotations

from tracr.rasp import rasp

from rasp_programs.case import Case
from rasp_programs.helpers import categorical_map, count_where, frac_prevs, histogram, numerical_indicator


def case_3() -> Case:
    def program() -> rasp.SOp:
        is_x = numerical_indicator(rasp.tokens, {"x": 1}, "is_x")
        return frac_prevs(is_x, "frac_x")

    return Case(
        id="3", name="frac_x", task_kind="regression",
        description="Returns the fraction of 'x' in the input up to the i-th position for all i.",
        vocab=("a", "b", "c", "x"), max_seq_len=5, causal=True, build_program=program,
        strict_edges=True, min_d_head=8,  # edge-level strictness meets its criterion at d_model 32 only
    )


def case_4() -> Case:
    def program() -> rasp.SOp:
        frac_open = frac_prevs(numerical_indicator(rasp.tokens, {"(": 1}, "is_open"), "frac_open")
        frac_close = frac_prevs(numerical_indicator(rasp.tokens, {")": 1}, "is_close"), "frac_close")
        # A linear combination compiles exactly; a numerical (Sequence)Map over a numerical mean
        # is discretised on an assumed value set and is wrong on some inputs (REFERENCE.md).
        return rasp.numerical(
            rasp.LinearSequenceMap(frac_open, frac_close, 1, -1)
        ).named("open_minus_close")

    return Case(
        id="4", name="frac_open_minus_close", task_kind="regression",
        description="Returns the fraction of previous open tokens minus the fraction of close "
        "tokens, at every position (positions 0..i).",
        vocab=("(", ")", "a"), max_seq_len=5, causal=True, build_program=program,
        notes="The difference of the two means is a LinearSequenceMap, which Tracr compiles "
        "exactly; a general numerical SequenceMap over means would be compiled wrongly.",
        strict_edges=True, min_d_head=8,  # as case 3: edge-level strictness meets its criterion at d_model 32 only
    )


LONG = 4


def case_11() -> Case:
    def program() -> rasp.SOp:
        is_long = categorical_map(lambda w: len(w) >= LONG, rasp.tokens, "is_long")
        return count_where(is_long, "long_word_count")

    return Case(
        id="11", name="count_long_words", task_kind="classification",
        description=f"Counts the words of the sequence by their length: the number of words with "
        f"at least {LONG} letters, at every position.",
        vocab=("a", "an", "cat", "tree", "house", "garden"), max_seq_len=5, build_program=program,
    )


def _frequency_class(count: int) -> str:
    return "rare" if count <= 1 else "common" if count <= 2 else "frequent"


def case_18() -> Case:
    def program() -> rasp.SOp:
        return categorical_map(_frequency_class, histogram("token_count"), "frequency_class")

    return Case(
        id="18", name="token_frequency_class", task_kind="classification", strict_edges=True,
        description="Classifies each token by how often it occurs in the sequence: 'rare' (once), "
        "'common' (twice) or 'frequent' (three times or more).",
        vocab=("a", "b", "c", "d"), max_seq_len=6, build_program=program,
    )


SPAM_WORDS = frozenset({"free", "win", "cash"})


def case_20() -> Case:
    def program() -> rasp.SOp:
        is_spam = categorical_map(lambda w: w in SPAM_WORDS, rasp.tokens, "is_spam_word")
        count = count_where(is_spam, "spam_word_count")
        return categorical_map(lambda c: "spam" if c > 0 else "ham", count, "spam_label")

    return Case(
        id="20", name="spam_detection", task_kind="classification",
        description="Detects spam: every position is labelled 'spam' if the message contains one of "
        "the keywords free, win, cash, else 'ham'.",
        vocab=("free", "win", "cash", "hello", "meeting", "lunch", "today"), max_seq_len=5,
        build_program=program,
    )
