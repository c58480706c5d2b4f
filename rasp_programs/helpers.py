"""RASP building blocks shared by the case catalogue.

Each helper returns a labelled RASP expression; labels become the names of residual subspaces in
the compiled model and the labels of high-level graph nodes, so they are chosen to read well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracr.rasp import rasp


def make_length(name: str = "length") -> rasp.SOp:
    """Length of the sequence at every position (SelectorWidth of an all-true selector)."""
    all_true = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE).named(f"{name}_select")
    return rasp.SelectorWidth(all_true).named(name)


def frac_prevs(values: rasp.SOp, name: str = "frac_prevs") -> rasp.SOp:
    """Mean of a numerical SOp over positions 0..i (inclusive) at each position i."""
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named(f"{name}_select")
    return rasp.numerical(rasp.Aggregate(prevs, values, default=0)).named(name)


def numerical_indicator(
    tokens: rasp.SOp, weights: dict[Any, float], name: str
) -> rasp.SOp:
    """Numerical Map token -> weight (0 for tokens not listed); the input of `frac_prevs`."""
    table = dict(weights)
    return rasp.numerical(rasp.Map(lambda t: table.get(t, 0), tokens)).named(name)


def categorical_map(f: Callable[[Any], Any], sop: rasp.SOp, name: str) -> rasp.SOp:
    """A categorical Map with a label."""
    return rasp.categorical(rasp.Map(f, sop)).named(name)


def count_where(flag: rasp.SOp, name: str) -> rasp.SOp:
    """Number of positions in the sequence where the boolean SOp `flag` is True.

    A query that is always True selects exactly the keys whose flag is True; SelectorWidth
    counts them. Tracr compiles this to one attention head and one MLP.
    """
    always = rasp.categorical(rasp.Map(lambda _: True, rasp.tokens)).named(f"{name}_query")
    select = rasp.Select(flag, always, rasp.Comparison.EQ).named(f"{name}_select")
    return rasp.SelectorWidth(select).named(name)


def token_with_index(name: str = "token_index") -> rasp.SOp:
    """Categorical pair (token, index): lets one selector compare tokens and positions at once."""
    return rasp.categorical(
        rasp.SequenceMap(lambda t, i: (t, i), rasp.tokens, rasp.indices)
    ).named(name)


def count_earlier_equal(
    pairs: rasp.SOp, position_test: Callable[[int, int], bool], name: str
) -> rasp.SOp:
    """Count of key positions k with the same token as the query q and position_test(k, q)."""
    select = rasp.Select(
        pairs, pairs, lambda k, q: k[0] == q[0] and position_test(k[1], q[1])
    ).named(f"{name}_select")
    return rasp.SelectorWidth(select).named(name)


def histogram(name: str = "hist") -> rasp.SOp:
    """How often each position's token occurs in the whole sequence."""
    same = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ).named(f"{name}_select")
    return rasp.SelectorWidth(same).named(name)
