"""Appendix H cases that map each integer element through an arithmetic rule or test
(InterpBench Table 11): 15, 30, 40, 41, 43, 46, 49, 51, 53, 56, 60, 62, 64, 68, 69, 72, 75, 79, 80,
83, 85, 86, 87, 90, 91, 95, 101, 102, 105, 106, 122, 130."""

from __future__ import annotations

import math

from rasp_programs.case import Case
from rasp_programs.catalogue_util import SIGNED, index_map_case, map_case

FIBONACCI = (0, 1, 1, 2, 3, 5, 8, 13, 21, 34)
LOW, HIGH = 2, 7  # the default range of cases 102 and 130 (Table 11)
THRESHOLD = 5  # cases 87 and 91
SUBTRAHEND = 3  # case 80


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def _distinct_prime_factors(n: int) -> int:
    return sum(1 for p in range(2, n + 1) if _is_prime(p) and n % p == 0)


def _next_prime(n: int) -> int:
    m = n + 1
    while not _is_prime(m):
        m += 1
    return m


def _reflect(x: int) -> int:
    if x < LOW:
        return 2 * LOW - x
    return 2 * HIGH - x if x > HIGH else x


def case_15() -> Case:
    return index_map_case("15", "double_minus_index",
                          "Returns each token multiplied by two and subtracted by its index.",
                          lambda t, i: 2 * t - i)


def case_30() -> Case:
    return map_case("30", "tag_in_range", "Tags numeric tokens in a sequence based on whether they "
                    f"fall within a given range ([{LOW}, {HIGH}]).",
                    lambda t: "in_range" if LOW <= t <= HIGH else "out_of_range")


def case_40() -> Case:
    return map_case("40", "sum_last_two_digits",
                    "Sum the last and previous to last digits of a number (each element).",
                    lambda t: t % 10 + t // 10 % 10, vocab=(7, 10, 19, 23, 45, 58, 61, 99, 106, 342),
                    notes="Read per element: each token is a number and the output is the sum of its "
                    "units and tens digits.")


def case_41() -> Case:
    return map_case("41", "absolute", "Make each element of the input sequence absolute", abs,
                    vocab=SIGNED)


def case_43() -> Case:
    return map_case("43", "fibonacci", "Returns the corresponding Fibonacci number for each element "
                    "in the input sequence.", lambda t: FIBONACCI[t])


def case_46() -> Case:
    return map_case("46", "decrement", "Decrements each element in the sequence by 1",
                    lambda t: t - 1)


def case_49() -> Case:
    return map_case("49", "decrement_to_multiple_of_3", "Decrements each element in the sequence "
                    "until it becomes a multiple of 3.", lambda t: t - t % 3)


def case_51() -> Case:
    return map_case("51", "is_fibonacci", "Checks if each element is a Fibonacci number",
                    lambda t: int(t in FIBONACCI), vocab=tuple(range(15)))


def case_53() -> Case:
    return index_map_case("53", "increment_odd_indices", "Increment elements at odd indices by 1",
                          lambda t, i: t + 1 if i % 2 else t)


def case_56() -> Case:
    return index_map_case("56", "zero_every_third", "Sets every third element to zero.",
                          lambda t, i: 0 if i % 3 == 2 else t,
                          notes="Every third element counting from 1: indices 2, 5, 8, ...")


def case_60() -> Case:
    return map_case("60", "increment", "Increment each element in the sequence by 1.",
                    lambda t: t + 1)


def case_62() -> Case:
    return map_case("62", "factorial", "Replaces each element with its factorial.", math.factorial,
                    vocab=tuple(range(8)))


def case_64() -> Case:
    return map_case("64", "cube", "Cubes each element in the sequence.", lambda t: t ** 3)


def case_68() -> Case:
    return map_case("68", "increment_to_multiple_of_3", "Increment each element until it becomes "
                    "a multiple of 3", lambda t: t + (-t) % 3)


def case_69() -> Case:
    return map_case("69", "sign", "Assign -1, 0, or 1 to each element of the input sequence based "
                    "on its sign.", lambda t: (t > 0) - (t < 0), vocab=SIGNED)


def case_72() -> Case:
    return map_case("72", "negate", "Negate each element in the input sequence.", lambda t: -t,
                    vocab=SIGNED)


def case_75() -> Case:
    return map_case("75", "double", "Double each element of the input sequence.", lambda t: 2 * t)


def case_79() -> Case:
    return map_case("79", "is_prime", "Check if each number in a sequence is prime",
                    lambda t: int(_is_prime(t)), vocab=tuple(range(16)))


def case_80() -> Case:
    return map_case("80", "subtract_constant", "Subtract a constant from each element of the input "
                    f"sequence (the constant is {SUBTRAHEND}).", lambda t: t - SUBTRAHEND)


def case_83() -> Case:
    return map_case("83", "triple", "Triple each element in the sequence.", lambda t: 3 * t)


def case_85() -> Case:
    return map_case("85", "square", "Square each element of the input sequence.", lambda t: t * t,
                    vocab=SIGNED)


def case_86() -> Case:
    return map_case("86", "is_power_of_2", "Check if each element is a power of 2. Return 1 if "
                    "true, otherwise 0.", lambda t: int(t > 0 and t & (t - 1) == 0),
                    vocab=tuple(range(17)))


def case_87() -> Case:
    return map_case("87", "binarize", "Binarize a sequence of integers using a threshold "
                    f"(1 if the element is at least {THRESHOLD}, else 0).",
                    lambda t: int(t >= THRESHOLD))


def case_90() -> Case:
    return map_case("90", "replace_token", "Replaces a specific token with another one "
                    "('a' becomes 'x').", lambda t: "x" if t == "a" else t,
                    vocab=("a", "b", "c", "d"))


def case_91() -> Case:
    return map_case("91", "zero_below_threshold", "Set all values below a threshold to 0 "
                    f"(threshold {THRESHOLD}).", lambda t: 0 if t < THRESHOLD else t)


def case_95() -> Case:
    return map_case("95", "distinct_prime_factors", "Counts the distinct prime factors of each "
                    "number in the input list.", _distinct_prime_factors,
                    vocab=(1, 2, 6, 7, 12, 15, 30, 49, 60, 210))


def case_101() -> Case:
    return map_case("101", "is_square", "Check if each element is a square of an integer.",
                    lambda t: int(math.isqrt(t) ** 2 == t), vocab=tuple(range(17)))


def case_102() -> Case:
    return map_case("102", "reflect_into_range", "Reflects each element within a range (default "
                    f"is [{LOW}, {HIGH}]).", _reflect,
                    notes="An element below 2 is mirrored at 2, one above 7 at 7 (x -> 2*bound - x).")


def case_105() -> Case:
    return map_case("105", "next_prime", "Replaces each number with the next prime after that "
                    "number.", _next_prime)


def case_106() -> Case:
    return index_map_case("106", "keep_index_1", "Sets all elements to zero except for the element "
                          "at index 1.", lambda t, i: t if i == 1 else 0)


def case_122() -> Case:
    return map_case("122", "divisible_by_3", "Check if each number is divisible by 3.",
                    lambda t: int(t % 3 == 0))


def case_130() -> Case:
    return map_case("130", "clip", f"Clips each element to be within a range (make the default "
                    f"range [{LOW}, {HIGH}]).", lambda t: min(max(t, LOW), HIGH))



def _is_anagram_of_listen(word: str) -> int:
    return int(sorted(word) == sorted("listen"))


def case_31() -> Case:
    return map_case("31", "anagram_of_listen", "Identify if tokens in the sequence are anagrams of "
                    "the word 'listen'.", _is_anagram_of_listen,
                    vocab=("listen", "silent", "enlist", "tinsel", "lister", "tinsels", "google"))
