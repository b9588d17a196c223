"""Prometheus' `histogram_quantile`, in exact Decimal arithmetic, and the breach test."""

from __future__ import annotations

from decimal import Context, Decimal

from billing.pricing.money import FIXED_QUANTUM, ROUNDING, ZERO

P99 = Decimal("0.99")
_EXACT = Context(prec=200, rounding=ROUNDING)
_MILLISECONDS = Decimal(1000)


def _monotonic(buckets: tuple[tuple[Decimal, Decimal], ...]) -> list[tuple[Decimal, Decimal]]:
    # Like Prometheus: counts derived with increase() can dip; a bucket never counts fewer
    # requests than the one below it.
    fixed: list[tuple[Decimal, Decimal]] = []
    highest = ZERO
    for le, count in buckets:
        highest = max(highest, count)
        fixed.append((le, highest))
    return fixed


def _locate(
    buckets: tuple[tuple[Decimal, Decimal], ...], quantile: Decimal
) -> tuple[Decimal, Decimal, Decimal, Decimal] | Decimal | None:
    """Where the quantile falls: `(start, end, rank_in_bucket, bucket_count)` for linear
    interpolation, a bound when Prometheus returns one without interpolating, or None (NaN)."""
    fixed = _monotonic(buckets)
    if len(fixed) < 2 or fixed[-1][1] == ZERO:
        return None
    rank = _EXACT.multiply(quantile, fixed[-1][1])
    position = next((at for at, (_, count) in enumerate(fixed[:-1]) if count >= rank), None)
    if position is None:
        return fixed[-2][0]  # rank falls in +Inf: the upper bound of the last finite bucket
    end, count = fixed[position]
    if position == 0 and end <= ZERO:
        return end
    start, below = (ZERO, ZERO) if position == 0 else fixed[position - 1]
    return start, end, _EXACT.subtract(rank, below), _EXACT.subtract(count, below)


def histogram_quantile(
    quantile: Decimal, buckets: tuple[tuple[Decimal, Decimal], ...]
) -> Decimal | None:
    """The quantile (seconds) of cumulative `(le, count)` buckets as Prometheus computes it:
    linear interpolation inside the bucket, 0 as the lower bound of the first bucket, the
    upper bound of the last finite bucket when the rank falls in `+Inf`; None where
    Prometheus gives NaN (no requests, or no finite bucket). Rounded to 30 places."""
    located = _locate(buckets, quantile)
    if located is None or isinstance(located, Decimal):
        return located
    start, end, rank, count = located
    width = _EXACT.subtract(end, start)
    value = _EXACT.add(start, _EXACT.divide(_EXACT.multiply(width, rank), count))
    return value.quantize(FIXED_QUANTUM, context=_EXACT)


def exceeds_objective(buckets: tuple[tuple[Decimal, Decimal], ...], slo_p99_ms: Decimal) -> bool:
    """True when the buckets' P99 is strictly above `slo_p99_ms`, decided exactly.

    `start + (end - start) * rank / count > slo / 1000` is tested multiplied out by
    `1000 * count > 0`, so no quotient is rounded before the comparison.
    """
    located = _locate(buckets, P99)
    if located is None:
        return False
    if isinstance(located, Decimal):
        return _EXACT.multiply(located, _MILLISECONDS) > slo_p99_ms
    start, end, rank, count = located
    left = _EXACT.multiply(_EXACT.multiply(start, count), _MILLISECONDS)
    left = _EXACT.add(
        left, _EXACT.multiply(_EXACT.multiply(_EXACT.subtract(end, start), rank), _MILLISECONDS)
    )
    return left > _EXACT.multiply(slo_p99_ms, count)
