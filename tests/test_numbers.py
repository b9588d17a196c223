"""kernel/numbers.py: whole numbers in text are ASCII digits, bounded, or nothing; sums of
rationals are exact."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.numbers import ID_DIGITS, exact_sum, whole_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("007", 7),
        ("9" * ID_DIGITS, int("9" * ID_DIGITS)),
        ("9" * (ID_DIGITS + 1), None),  # beyond a bigint id
        ("\u00b9", None),  # superscript one: isdigit() but not int()
        ("\u0661", None),  # Arabic-Indic one: int() reads it, but no id is written so
        ("", None),
        ("-1", None),
        (" 1", None),
        ("1.0", None),
    ],
)
def test_it_reads_ascii_digits_only(text: str, expected: int | None) -> None:
    assert whole_number(text) == expected


def test_it_bounds_the_digits() -> None:
    assert whole_number("65535", max_digits=5) == 65535
    assert whole_number("655350", max_digits=5) is None


@given(st.text(max_size=30))
def test_it_never_raises_and_reads_only_what_int_reads(text: str) -> None:
    number = whole_number(text)
    assert number is None or (text.isascii() and int(text) == number >= 0)


@given(st.lists(st.fractions(max_denominator=10**6), max_size=40))
def test_it_sums_rationals_exactly_as_adding_them_one_by_one(values: list[Fraction]) -> None:
    assert exact_sum(values) == sum(values, Fraction(0))
