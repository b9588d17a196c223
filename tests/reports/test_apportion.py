"""A line's rounded amount is shared among its tasks to the cent, summing exactly."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reports.rows import apportion


def test_it_gives_leftover_cents_to_the_largest_remainders() -> None:
    assert apportion(Decimal("10.00"), [Decimal(1), Decimal(1), Decimal(1)]) == [
        Decimal("3.34"),
        Decimal("3.33"),
        Decimal("3.33"),
    ]


def test_it_keeps_the_sign_of_a_credit() -> None:
    shares = apportion(Decimal("-64.35"), [Decimal("-2"), Decimal("-1")])
    assert shares == [Decimal("-42.90"), Decimal("-21.45")]


def test_it_refuses_fractions_of_a_cent_and_all_zero_weights() -> None:
    with pytest.raises(ValueError, match="cents"):
        apportion(Decimal("1.005"), [Decimal(1)])
    with pytest.raises(ValueError, match="zero"):
        apportion(Decimal("1.00"), [Decimal(0)])


@given(
    cents=st.integers(min_value=-(10**9), max_value=10**9),
    weights=st.lists(
        st.decimals(min_value=0, max_value=10**6, places=6, allow_nan=False), min_size=1
    ).filter(lambda ws: sum(ws) > 0),
)
def test_it_always_sums_to_the_total_and_each_share_is_within_a_cent(cents, weights) -> None:
    total = Decimal(cents) / 100
    shares = apportion(total, weights)
    assert sum(shares, Decimal(0)) == total
    weight_sum = sum(weights)
    for share, weight in zip(shares, weights, strict=True):
        assert abs(share - total * weight / weight_sum) < Decimal("0.01")
