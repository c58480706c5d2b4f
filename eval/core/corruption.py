"""A case's clean inputs + a corruption style -> the counterfactual inputs circuit methods contrast with.

Two styles (the counterfactual is what a patching or attribution method sees; MIB gives each task
several counterfactual types, and which one a method gets decides which circuit it can find):

- `resample`: an independent draw from the case's sampler (seed + COUNTERFACTUAL_SEED_OFFSET), the
  interchange SIIT trains with and every report's default;
- `token:K`: a minimal pair (symmetric token replacement, Zhang & Nanda 2024): the clean input with
  its K-th token (1-based; negative K counts from the end, -1 the last) replaced by another value of
  the vocabulary, drawn uniformly; everything else, the length included, stays. A component whose
  value does not depend on that token carries the same value in both runs, so no method that contrasts
  the two runs can see it (Heimersheim & Nanda 2024, "How to use and interpret activation patching").

A token corruption needs inputs drawn uniformly (a case without its own sampler): a case whose sampler
constrains its inputs (sorted, distinct, balanced) could leave its domain when one token changes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

COUNTERFACTUAL_SEED_OFFSET = 1_000_003
"""Counterfactuals are drawn with seed + this, so they never coincide with the clean draw."""
_TOKEN = re.compile(r"^token:(-?[1-9][0-9]*)$")


class CorruptionError(ValueError):
    """A corruption style that does not parse, or that the case cannot take (one line)."""


@dataclasses.dataclass(frozen=True)
class Corruption:
    """A parsed corruption style: `resample`, or `token:K` (position K, 1-based; negative from the end)."""

    spec: str
    """The style as written (`resample`, `token:1`, `token:-1`)."""
    position: int | None
    """K for `token:K`; None for `resample`."""

    def describe(self) -> str:
        """One line for reports: what the counterfactuals are."""
        if self.position is None:
            return f"resampled from the case's sampler (seed + {COUNTERFACTUAL_SEED_OFFSET})"
        k = self.position
        which = "the last token" if k == -1 else f"token {k}" if k > 0 else f"token {-k} from the end"
        return (f"{self.spec}: the clean input with {which} replaced by another vocabulary value, drawn with "
                f"seed + {COUNTERFACTUAL_SEED_OFFSET}; every other token and the length kept")


def parse_corruption(spec: str) -> Corruption:
    """`resample` or `token:K` (K a nonzero integer), else a one-line CorruptionError."""
    if spec == "resample":
        return Corruption(spec=spec, position=None)
    if (m := _TOKEN.match(spec)) is not None:
        return Corruption(spec=spec, position=int(m.group(1)))
    raise CorruptionError(f"unknown corruption {spec!r}; allowed: resample, token:K (K = 1, 2, ... or -1, -2, "
                          "... from the end)")


def check_corruption(case: Any, spec: str) -> Corruption:
    """`spec` parsed and checked against `case`: a token corruption needs a uniform sampler and K within
    the shortest input. One-line CorruptionError otherwise."""
    c = parse_corruption(spec)
    if c.position is None:
        return c
    if getattr(case, "sampler", None) is not None:
        raise CorruptionError(f"case {case.id} draws its inputs from its own sampler; a token corruption could "
                              "leave its domain (use --corruption resample)")
    if abs(c.position) > case.min_seq_len:
        raise CorruptionError(f"corruption {spec}: case {case.id}'s inputs can be as short as "
                              f"{case.min_seq_len} tokens, so |K| must be at most {case.min_seq_len}")
    if len(case.vocab) < 2:
        raise CorruptionError(f"corruption {spec}: case {case.id} has one token value; nothing to replace it with")
    return c


def counterfactual_inputs(case: Any, clean: Sequence[tuple], seed: int, spec: str = "resample") -> list[tuple]:
    """The counterfactual of each clean input under corruption `spec` (checked against the case)."""
    c = check_corruption(case, spec)
    if c.position is None:
        return case.sample(len(clean), seed + COUNTERFACTUAL_SEED_OFFSET)
    rng = np.random.default_rng(seed + COUNTERFACTUAL_SEED_OFFSET)
    vocab = list(case.vocab)
    out = []
    for seq in clean:
        k = c.position - 1 if c.position > 0 else len(seq) + c.position
        others = [v for v in vocab if v != seq[k]]
        out.append((*seq[:k], others[int(rng.integers(len(others)))], *seq[k + 1:]))
    return out
