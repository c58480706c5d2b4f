"""Appendix H cases that count or compare across the whole sequence (attention does the counting)
(InterpBench Table 11): 7, 14, 24, 25, 39, 44, 63, 97, 124, 129."""

from __future__ import annotations

from tracr.rasp import rasp

from rasp_programs.case import Case
from rasp_programs.helpers import (
    categorical_map, count_earlier_equal, count_where, frac_prevs, histogram, make_length,
    numerical_indicator, token_with_index,
)

LETTERS = ("a", "b", "c", "d")
SMALL = (0, 1, 2, 3, 4)


def case_7() -> Case:
    return Case(
        id="7", name="token_count", task_kind="classification",
        description="Returns the number of times each token occurs in the input.",
        vocab=LETTERS, max_seq_len=5, build_program=lambda: histogram("token_count"),
    )


def case_14() -> Case:
    def program() -> rasp.SOp:
        return count_where(categorical_map(lambda t: t == "a", rasp.tokens, "is_a"), "count_a")

    return Case(
        id="14", name="count_a", task_kind="classification",
        description="Returns the count of 'a' in the input sequence.",
        vocab=LETTERS, max_seq_len=5, build_program=program,
    )


def case_24() -> Case:
    def program() -> rasp.SOp:
        earlier = count_earlier_equal(token_with_index(), lambda k, q: k < q, "earlier_occurrences")
        return categorical_map(lambda c: int(c == 0), earlier, "first_occurrence")

    return Case(
        id="24", name="first_occurrence", task_kind="classification",
        description="Identifies the first occurrence of each token in a sequence (1 at a first "
        "occurrence, else 0).", vocab=LETTERS, max_seq_len=5, causal=True, build_program=program,
    )


def case_25() -> Case:
    def program() -> rasp.SOp:
        count, length = histogram("token_count"), make_length()
        return rasp.categorical(rasp.SequenceMap(
            lambda c, n: round(c / n, 3) if n else 0, count, length)).named("normalized_frequency")

    return Case(
        id="25", name="normalized_frequency", task_kind="classification",
        description="Normalizes token frequencies in a sequence to a range between 0 and 1 (the "
        "count of each token divided by the length).", vocab=LETTERS, max_seq_len=5,
        build_program=program, notes="Outputs are rounded to 3 decimals (categorical labels).",
    )


def case_39() -> Case:
    def program() -> rasp.SOp:
        return frac_prevs(numerical_indicator(rasp.tokens, {"x": 1}, "is_x"), "frac_x")

    return Case(
        id="39", name="frac_x_long", task_kind="regression",
        description="Returns the fraction of 'x' in the input up to the i-th position for all i "
        "(longer sequence length).", vocab=("a", "b", "c", "x"), max_seq_len=10, causal=True,
        build_program=program, notes="Case 3 with inputs up to 10 tokens instead of 5.",
    )


def _rank_case(case_id: str, name: str, description: str, comparison: rasp.Comparison) -> Case:
    def program() -> rasp.SOp:
        # Select(keys, queries, GT) holds where key > query: the keys greater than this element
        return rasp.SelectorWidth(
            rasp.Select(rasp.tokens, rasp.tokens, comparison).named(f"{name}_select")).named(name)

    return Case(id=case_id, name=name, task_kind="classification", description=description,
                vocab=SMALL, max_seq_len=5, build_program=program)


def case_44() -> Case:
    return _rank_case("44", "count_greater", "Replaces each element with the number of elements "
                      "greater than it in the sequence", rasp.Comparison.GT)


def case_63() -> Case:
    return _rank_case("63", "count_less", "Replaces each element with the number of elements less "
                      "than it in the sequence.", rasp.Comparison.LT)


def case_97() -> Case:
    def program() -> rasp.SOp:
        greater = rasp.SelectorWidth(rasp.Select(
            rasp.tokens, rasp.tokens, rasp.Comparison.GT).named("greater_select")).named("greater")
        is_max = categorical_map(lambda g: g == 0, greater, "is_max")
        always = categorical_map(lambda _: True, rasp.tokens, "max_query")
        # every selected key holds the maximum, so the categorical mean is that value
        maximum = rasp.categorical(rasp.Aggregate(
            rasp.Select(is_max, always, rasp.Comparison.EQ).named("max_select"), rasp.tokens)
        ).named("maximum")
        return rasp.categorical(rasp.SequenceMap(
            lambda t, m: round(t / m, 3), rasp.tokens, maximum)).named("scaled")

    return Case(
        id="97", name="scale_by_max", task_kind="classification",
        description="Scale a sequence by its maximum element.", vocab=(1, 2, 3, 4, 5),
        max_seq_len=5, build_program=program,
        notes="Vocabulary 1..5 (no division by zero); outputs rounded to 3 decimals.",
    )


def case_124() -> Case:
    def program() -> rasp.SOp:
        count, length = histogram("token_count"), make_length()
        return rasp.categorical(rasp.SequenceMap(
            lambda c, n: int(c == n), count, length)).named("all_equal")

    return Case(
        id="124", name="all_equal", task_kind="classification",
        description="Check if all elements in a list are equal (1 at every position if so, else 0).",
        vocab=(0, 1, 2), max_seq_len=4, build_program=program,
        notes="Short inputs over 3 tokens so that all-equal inputs are common.",
    )


MULTIPLE = 2


def case_129() -> Case:
    def program() -> rasp.SOp:
        odd = categorical_map(lambda t: t % MULTIPLE != 0, rasp.tokens, "not_multiple")
        return categorical_map(lambda c: int(c == 0), count_where(odd, "not_multiple_count"),
                               "all_multiples")

    return Case(
        id="129", name="all_multiples", task_kind="classification",
        description=f"Checks if all elements are a multiple of n (set the default at {MULTIPLE}).",
        vocab=(0, 1, 2, 4, 6), max_seq_len=4, build_program=program,
        notes="Mostly even vocabulary and short inputs so that both answers are common.",
    )
