"""Cases whose output at each position depends only on the token there (one categorical Map,
or a SequenceMap of token and position): InterpBench cases 8, 29, 33, 34, 35, 36, 37."""

from __future__ import annotations

from tracr.rasp import rasp

from rasp_programs.case import Case
from rasp_programs.helpers import categorical_map

WORDS = ("a", "to", "the", "word", "tiger", "banana")  # lengths 1..6, odd and even


def case_8() -> Case:
    return Case(
        id="8", name="identity", task_kind="classification", strict_edges=True,
        description="Identity: the output at each position is the input token.",
        vocab=("a", "b", "c"), max_seq_len=5, causal=True,
        build_program=lambda: categorical_map(lambda t: t, rasp.tokens, "identity"),
    )


def _abbreviate(word: str) -> str:
    return word[0].upper()


def case_29() -> Case:
    return Case(
        id="29", name="abbreviate", task_kind="classification", strict_edges=True,
        description="Creates an abbreviation for each token: its first letter, upper-cased.",
        vocab=("apple", "banana", "cherry", "date", "apricot", "blueberry"), max_seq_len=5,
        causal=True,
        build_program=lambda: categorical_map(_abbreviate, rasp.tokens, "abbreviation"),
    )


def _parity(word: str) -> str:
    return "odd" if len(word) % 2 else "even"


def case_33() -> Case:
    return Case(
        id="33", name="token_length_parity", task_kind="classification",
        description="Checks whether each token's length is odd or even.",
        vocab=WORDS, max_seq_len=5, causal=True,
        build_program=lambda: categorical_map(_parity, rasp.tokens, "length_parity"),
    )


VOWELS = frozenset("aeiou")


def _vowel_consonant_ratio(word: str) -> str:
    vowels = sum(c in VOWELS for c in word)
    consonants = len(word) - vowels
    return "inf" if consonants == 0 else f"{vowels / consonants:.2f}"


def case_34() -> Case:
    return Case(
        id="34", name="vowel_consonant_ratio", task_kind="classification", strict_edges=True,
        description="Calculates the ratio of vowels to consonants in each word "
        "(two decimals, 'inf' for a word without consonants).",
        vocab=("a", "sky", "tree", "apple", "queue", "banana", "strength"), max_seq_len=5,
        causal=True,
        build_program=lambda: categorical_map(_vowel_consonant_ratio, rasp.tokens, "vowel_ratio"),
    )


def _alternate(char: str, index: int) -> str:
    return char.upper() if index % 2 == 0 else char.lower()


def case_35() -> Case:
    return Case(
        id="35", name="alternate_capitalization", task_kind="classification", strict_edges=True,
        description="Alternates capitalization of the characters of a word: upper-case at even "
        "positions, lower-case at odd ones.",
        vocab=("a", "b", "c", "d"), max_seq_len=6, causal=True,
        build_program=lambda: rasp.categorical(
            rasp.SequenceMap(_alternate, rasp.tokens, rasp.indices)
        ).named("alternated"),
    )


SENTIMENT = {"😊": "positive", "😂": "positive", "😍": "positive", "😢": "negative",
             "😠": "negative", "😐": "neutral", "🤔": "neutral"}


def case_36() -> Case:
    return Case(
        id="36", name="emoji_sentiment", task_kind="classification", strict_edges=True,
        description="Classifies each token as 'positive', 'negative' or 'neutral' by its emoji.",
        vocab=tuple(SENTIMENT), max_seq_len=5, causal=True,
        build_program=lambda: categorical_map(SENTIMENT.__getitem__, rasp.tokens, "sentiment"),
    )


EXCLUDED = frozenset({"the", "a"})


def _reverse_unless_excluded(word: str) -> str:
    return word if word in EXCLUDED else word[::-1]


def case_37() -> Case:
    return Case(
        id="37", name="reverse_words", task_kind="classification", strict_edges=True,
        description="Reverses each word of the sequence except the excluded words 'the' and 'a'.",
        vocab=("the", "a", "cat", "sat", "on", "mat", "dog"), max_seq_len=5, causal=True,
        build_program=lambda: categorical_map(_reverse_unless_excluded, rasp.tokens, "reversed"),
    )
