"""P99 as Prometheus' histogram_quantile computes it, and the breach test built on it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.pricing import histogram_quantile
from kernel.histogram import exceeds_objective

INF = Decimal("Infinity")


def buckets(*pairs: tuple[str, int]) -> tuple[tuple[Decimal, Decimal], ...]:
    return tuple((INF if le == "+Inf" else Decimal(le), Decimal(count)) for le, count in pairs)


STANDARD = buckets(("0.1", 50), ("0.5", 150), ("+Inf", 200))


@pytest.mark.parametrize(
    ("quantile", "histogram", "expected"),
    [
        # rank 40 in the first bucket: lower bound 0, 0.1 x 40/50
        pytest.param("0.2", STANDARD, "0.08", id="first-bucket-from-zero"),
        # rank 100: 0.1 + 0.4 x (100 - 50) / 100
        pytest.param("0.5", STANDARD, "0.3", id="interpolated"),
        # rank 150 exactly at a bucket's count: its upper bound
        pytest.param("0.75", STANDARD, "0.5", id="on-a-boundary"),
        # rank 198 beyond the last finite bucket: its upper bound
        pytest.param("0.99", STANDARD, "0.5", id="rank-in-plus-inf"),
        # counts that dip are made monotonic first, like Prometheus: rank 70 falls in
        # (0.5, 1] above 60 (not 50), so 0.5 + 0.5 x 10 / 40
        pytest.param(
            "0.7",
            buckets(("0.1", 60), ("0.5", 50), ("1", 100), ("+Inf", 100)),
            "0.625",
            id="non-monotonic",
        ),
    ],
)
def test_it_computes_quantiles_like_prometheus(quantile, histogram, expected):
    assert histogram_quantile(Decimal(quantile), histogram) == Decimal(expected)


@pytest.mark.parametrize(
    "histogram",
    [
        pytest.param(buckets(("0.1", 0), ("+Inf", 0)), id="no-requests"),
        pytest.param(buckets(("+Inf", 10)), id="no-finite-bucket"),
    ],
)
def test_it_has_no_quantile_where_prometheus_gives_nan(histogram):
    assert histogram_quantile(Decimal("0.99"), histogram) is None
    assert not exceeds_objective(histogram, Decimal(0))


@pytest.mark.parametrize(
    ("slo_ms", "breached"),
    [
        pytest.param("301", False, id="under"),
        pytest.param("300", False, id="equal-is-no-breach"),
        pytest.param("299.999", True, id="over"),
    ],
)
def test_it_decides_a_breach_exactly(slo_ms, breached):
    # rank 198 of 200 lands exactly on the upper bound 0.3 s of the second bucket.
    histogram = buckets(("0.1", 0), ("0.3", 198), ("0.5", 200), ("+Inf", 200))

    assert histogram_quantile(Decimal("0.99"), histogram) == Decimal("0.3")
    assert exceeds_objective(histogram, Decimal(slo_ms)) is breached
