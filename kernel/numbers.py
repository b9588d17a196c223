"""Whole numbers written as text: an id in a query string or form, a port, a MIG slice count;
and exact sums of many rationals.

One rule, because the obvious one is wrong: `str.isdigit()` is also true of superscripts and
other Unicode digits ("¹", "²") that `int()` refuses, so `int(text) if text.isdigit()` answers
`?team=¹` with a 500 instead of "no such team" (found by the schema fuzzer).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

# PostgreSQL's bigint holds any number of 18 digits; a 19th may overflow it.
ID_DIGITS = 18


def whole_number(text: str, *, max_digits: int = ID_DIGITS) -> int | None:
    """`text` as a non-negative integer when it is ASCII digits only, at most `max_digits` of
    them; else None (the caller says what was wrong, naming the field)."""
    if text.isascii() and text.isdigit() and len(text) <= max_digits:
        return int(text)
    return None


def exact_sum(values: Iterable[Fraction]) -> Fraction | int:
    """The values added exactly (0 for none) over their least common denominator: one
    reduction for the sum, where adding rationals one by one reduces after each (a gang of
    many pods whose busy times have long denominators paid that per pod)."""
    pairs = [(value.numerator, value.denominator) for value in values]
    if not pairs:
        return 0
    common = math.lcm(*[denominator for _, denominator in pairs])
    return Fraction(
        sum(numerator * (common // denominator) for numerator, denominator in pairs), common
    )
