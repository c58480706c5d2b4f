"""Appendix H cases that apply a real-valued function to every element (InterpBench Table 11):
50, 52, 54, 55, 65, 66, 70, 71, 73, 77, 84, 104, 114, 121, 123.

All are "Cls" in Table 11: the output is a categorical value per position, so results are
rounded to 3 decimals to give the output vocabulary finite, readable labels.
"""

from __future__ import annotations

import math

from rasp_programs.case import Case
from rasp_programs.catalogue_util import SIGNED, map_case, rounded, with_length

UNIT = (-1.0, -0.5, 0.0, 0.5, 1.0)  # the domain of arcsin / arccos
ROUNDING = (0.2, 0.5, 1.4, 1.5, 2.5, 2.7, 3.1, 3.5)  # halves included: Python rounds them to even
POSITIVE = tuple(range(1, 10))  # log10 needs x > 0
NOTE = "Outputs are rounded to 3 decimals (a categorical output needs a finite label set)."


def case_50() -> Case:
    return map_case("50", "hyperbolic_cosine", "Applies the hyperbolic cosine to each element.",
                    rounded(math.cosh), vocab=SIGNED, notes=NOTE)


def case_52() -> Case:
    return map_case("52", "square_root", "Takes the square root of each element.",
                    rounded(math.sqrt), notes=NOTE)


def case_54() -> Case:
    return map_case("54", "hyperbolic_tangent", "Applies the hyperbolic tangent to each element.",
                    rounded(math.tanh), vocab=SIGNED, notes=NOTE)


def case_55() -> Case:
    return map_case("55", "hyperbolic_sine", "Applies the hyperbolic sine to each element.",
                    rounded(math.sinh), vocab=SIGNED, notes=NOTE)


def _cube_root(x: float) -> float:
    return math.copysign(abs(x) ** (1 / 3), x)


def case_65() -> Case:
    return map_case("65", "cube_root",
                    "Calculate the cube root of each element in the input sequence.",
                    rounded(_cube_root), vocab=SIGNED, notes=NOTE)


def case_66() -> Case:
    return map_case("66", "round", "Round each element in the input sequence to the nearest integer.",
                    round, vocab=ROUNDING,
                    notes="Python's round: halves go to the even neighbour (1.5 -> 2, 2.5 -> 2).")


def case_70() -> Case:
    return map_case("70", "cosine",
                    "Apply the cosine function to each element of the input sequence.",
                    rounded(math.cos), notes=NOTE)


def case_71() -> Case:
    return with_length("71", "divide_by_length", "Divide each element by the length of the sequence",
                       lambda t, i, n: round(t / n, 3) if n else 0, notes=NOTE + " The length is counted "
                       "by an attention head (SelectorWidth), so the model is not causal.")


def case_73() -> Case:
    return map_case("73", "sine", "Apply the sine function to each element of the input sequence.",
                    rounded(math.sin), notes=NOTE)


def case_77() -> Case:
    return map_case("77", "tangent", "Apply the tangent function to each element of the sequence.",
                    rounded(math.tan), notes=NOTE)


def case_84() -> Case:
    return map_case("84", "arctangent",
                    "Apply the arctangent function to each element of the input sequence.",
                    rounded(math.atan), vocab=SIGNED, notes=NOTE)


def case_104() -> Case:
    return map_case("104", "exponential",
                    "Apply exponential function to all elements of the input sequence.",
                    rounded(math.exp), vocab=tuple(range(-3, 6)), notes=NOTE)


def case_114() -> Case:
    return map_case("114", "log10",
                    "Apply a logarithm base 10 to each element of the input sequence.",
                    rounded(math.log10), vocab=POSITIVE,
                    notes=NOTE + " The vocabulary is 1..9 (log10 is undefined at 0).")


def case_121() -> Case:
    return map_case("121", "arcsine", "Compute arcsine of all elements in the input sequence.",
                    rounded(math.asin), vocab=UNIT,
                    notes=NOTE + " The vocabulary lies in [-1, 1], arcsine's domain.")


def case_123() -> Case:
    return map_case("123", "arccosine", "Apply arccosine to each element of the input sequence.",
                    rounded(math.acos), vocab=UNIT,
                    notes=NOTE + " The vocabulary lies in [-1, 1], arccosine's domain.")

