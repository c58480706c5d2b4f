"""Appendix H cases whose output depends on where an element sits, often relative to the length
(InterpBench Table 11): 2, 45, 58, 67, 82, 93, 103, 110, 111, 113.

The length is counted by attention (SelectorWidth), so none of these models is causal.
"""

from __future__ import annotations

import numpy as np
from tracr.rasp import rasp

from rasp_programs.case import Case
from rasp_programs.catalogue_util import gather_case, with_length
from rasp_programs.helpers import count_where, make_length, token_with_index

VOCAB = tuple(range(6))


def case_2() -> Case:
    return gather_case("2", "reverse", "Reverse the input sequence.", lambda i, n: n - 1 - i,
                       vocab=VOCAB)


def case_45() -> Case:
    return with_length("45", "double_first_half", "Doubles the first half of the sequence",
                       lambda t, i, n: 2 * t if i < n // 2 else t, vocab=VOCAB,
                       notes="The first half is the first floor(length / 2) elements.")


def _mirror_source(i: int, n: int) -> int:
    return i if i < (n + 1) // 2 else n - 1 - i


def case_58() -> Case:
    return gather_case("58", "mirror_first_half", "Mirrors the first half of the sequence to the "
                       "second half.", _mirror_source, vocab=VOCAB,
                       notes="Position i of the second half shows element length-1-i; the first "
                       "ceil(length / 2) elements are kept.")


def case_67() -> Case:
    return with_length("67", "times_length", "Multiply each element of the sequence by the length "
                       "of the sequence.", lambda t, i, n: t * n, vocab=VOCAB)


def case_82() -> Case:
    return with_length("82", "halve_second_half", "Halve the elements in the second half of the "
                       "sequence.", lambda t, i, n: t / 2 if i >= n // 2 else float(t), vocab=VOCAB,
                       notes="The second half starts at index floor(length / 2).")


def _swap_odd_source(i: int, n: int) -> int:
    if i % 2 == 1 and i + 1 < n:
        return i + 1
    return i - 1 if i % 2 == 0 and i >= 2 else i


def case_93() -> Case:
    return gather_case("93", "swap_after_odd", "Swaps the nth with the n+1th element if n%2==1.",
                       _swap_odd_source, vocab=VOCAB,
                       notes="Pairs (1, 2), (3, 4), ... are swapped; index 0 and an unpaired last "
                       "element stay.")


def _swap_pairs_source(i: int, n: int) -> int:
    if i % 2 == 0:
        return i + 1 if i + 1 < n else i
    return i - 1


def case_103() -> Case:
    return gather_case("103", "swap_consecutive", "Swap consecutive numbers in a list",
                       _swap_pairs_source, vocab=VOCAB,
                       notes="Pairs (0, 1), (2, 3), ... are swapped; an unpaired last element stays.")


def case_110() -> Case:
    return gather_case("110", "interleave_zeros", "Inserts zeros between each element, removing "
                       "the latter half of the list.", lambda i, n: i // 2, vocab=VOCAB,
                       fill=lambda t, i: t if i % 2 == 0 else 0, needs_length=False,
                       notes="Output i is element i/2 at even i and 0 at odd i (the length is kept).")


def case_111() -> Case:
    return gather_case("111", "last_then_zeros", "Returns the last element of the sequence and pads "
                       "the rest with zeros.", lambda i, n: n - 1, vocab=VOCAB,
                       fill=lambda t, i: t if i == 0 else 0)


def _invert_if_sorted(descents: int, pair: tuple) -> int:
    token, reversed_token = pair
    return reversed_token if descents == 0 else token


def case_113() -> Case:
    def program() -> rasp.SOp:
        pairs = token_with_index()
        # 1 where the previous element is larger (a descent ends here), else 0
        descent = rasp.SelectorWidth(rasp.Select(
            pairs, pairs, lambda k, q: k[1] == q[1] - 1 and k[0] > q[0]).named("descent_select")
        ).named("descent")
        is_descent = rasp.categorical(rasp.Map(lambda d: d > 0, descent)).named("is_descent")
        descents = count_where(is_descent, "descents")
        length = make_length()
        opposite = rasp.categorical(
            rasp.SequenceMap(lambda i, n: n - 1 - i, rasp.indices, length)).named("opposite_index")
        flip = rasp.Select(rasp.indices, opposite, rasp.Comparison.EQ).named("reverse_select")
        reversed_tokens = rasp.categorical(rasp.Aggregate(flip, rasp.tokens)).named("reversed")
        both = rasp.categorical(
            rasp.SequenceMap(lambda a, b: (a, b), rasp.tokens, reversed_tokens)).named("token_pair")
        return rasp.categorical(
            rasp.SequenceMap(_invert_if_sorted, descents, both)).named("invert_if_sorted")

    return Case(
        id="113", name="invert_if_sorted", task_kind="classification",
        description="Inverts the sequence if it is sorted in ascending order, otherwise leaves it "
        "unchanged.", vocab=(0, 1, 2, 3), max_seq_len=5, causal=False, build_program=program,
        sampler=_often_sorted_sampler((0, 1, 2, 3), 1, 5),
        notes="Sorted means non-decreasing. Half of the sampled inputs are sorted, so both branches "
        "are exercised.",
    )


def _often_sorted_sampler(vocab: tuple, min_len: int, max_len: int):
    """Half the inputs sorted (non-decreasing), half uniform."""

    def sample(rng: np.random.Generator, n: int) -> list[tuple]:
        out = []
        for k in rng.integers(min_len, max_len + 1, size=n):
            seq = [vocab[j] for j in rng.integers(0, len(vocab), size=k)]
            out.append(tuple(sorted(seq) if rng.random() < 0.5 else seq))
        return out

    return sample
