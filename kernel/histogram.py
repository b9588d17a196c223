"""Latency histograms: reading stored buckets, Prometheus' `histogram_quantile` in exact
Decimal arithmetic, and the SLA breach test (docs/pricing.md rule 4, docs/telemetry.md
"Latency").

A histogram is cumulative `(le, count)` buckets in increasing `le` (seconds), the last `le`
being `+Inf`, whose count is the number of requests. Stored histograms are JSON
`[[le, cumulative_count], ...]` with `le` as text ("0.5", "+Inf") or a number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Context, Decimal

from kernel.money import FIXED_QUANTUM, ROUNDING

Buckets = tuple[tuple[Decimal, Decimal], ...]
StoredBuckets = Sequence[Sequence[object]]

P99 = Decimal("0.99")
INFINITY = Decimal("Infinity")
# How exporters and JSON spell the last bound.
INFINITY_SPELLINGS = ("+Inf", "Inf", "inf", "+inf")
_ZERO = Decimal(0)
_EXACT = Context(prec=200, rounding=ROUNDING)
_MILLISECONDS = Decimal(1000)
_BOUNDS: dict[str, Decimal] = {}  # "le" text -> Decimal: a month repeats the same few bounds


def is_infinity(le: object) -> bool:
    """True when `le` is one of the spellings of the `+Inf` bound."""
    return le in INFINITY_SPELLINGS


def parse_bound(le: object) -> Decimal:
    """A bucket bound as stored (text or number) as a Decimal; `+Inf` as Infinity."""
    text = str(le)
    bound = _BOUNDS.get(text)
    if bound is None:
        bound = INFINITY if is_infinity(text) else Decimal(text)
        if len(_BOUNDS) < 10_000:
            _BOUNDS[text] = bound
    return bound


def parse_histogram(stored: StoredBuckets) -> Buckets:
    """Stored `[[le, cumulative_count], ...]` as Decimal pairs in increasing `le`."""
    return tuple(sorted((parse_bound(le), Decimal(str(count))) for le, count in stored))


def stored_p99(stored: StoredBuckets) -> Decimal | None:
    """P99 in seconds of one stored histogram; None where Prometheus gives NaN (no requests,
    no `+Inf` bucket, no finite bucket)."""
    buckets = parse_histogram(stored)
    if len(buckets) < 2 or not buckets[-1][0].is_infinite():
        return None
    return histogram_quantile(P99, buckets)


def _counts(stored: StoredBuckets) -> list[int | Decimal]:
    # Whole counts stay ints (exact and fast to add); anything else becomes an exact Decimal.
    counts = [pair[1] for pair in stored]
    if all(type(count) is int for count in counts):
        return counts
    return [count if type(count) is int else Decimal(str(count)) for count in counts]


def merge_histograms(histograms: Iterable[StoredBuckets]) -> Buckets:
    """A period's histogram: stored per-interval buckets summed per `le`.

    If a service's bucket layout changed inside the period (an exporter upgrade), only the
    bounds present in every interval are kept: summing a bound that some intervals lack would
    under-count it and bend the quantile. Sums run per layout (the stored `le` values, in
    order), by position, in ints where the counts are whole.
    """
    sums: dict[tuple[object, ...], list[int | Decimal]] = {}
    for stored in histograms:
        layout = tuple([pair[0] for pair in stored])
        counts = _counts(stored)
        total = sums.get(layout)
        sums[layout] = counts if total is None else [a + b for a, b in zip(total, counts)]  # noqa: B905
    if not sums:
        return ()
    bounds = {layout: [parse_bound(le) for le in layout] for layout in sums}
    common = set.intersection(*(set(each) for each in bounds.values()))
    totals: dict[Decimal, int | Decimal] = dict.fromkeys(common, 0)
    for layout, counts in sums.items():
        for bound, count in zip(bounds[layout], counts, strict=True):
            if bound in totals:
                totals[bound] += count
    return tuple(sorted((le, Decimal(count)) for le, count in totals.items()))


def _monotonic(buckets: Buckets) -> list[tuple[Decimal, Decimal]]:
    # Like Prometheus: counts derived with increase() can dip; a bucket never counts fewer
    # requests than the one below it.
    fixed: list[tuple[Decimal, Decimal]] = []
    highest = _ZERO
    for le, count in buckets:
        highest = max(highest, count)
        fixed.append((le, highest))
    return fixed


def _locate(
    buckets: Buckets, quantile: Decimal
) -> tuple[Decimal, Decimal, Decimal, Decimal] | Decimal | None:
    """Where the quantile falls: `(start, end, rank_in_bucket, bucket_count)` for linear
    interpolation, a bound when Prometheus returns one without interpolating, or None (NaN)."""
    fixed = _monotonic(buckets)
    if len(fixed) < 2 or fixed[-1][1] == _ZERO:
        return None
    rank = _EXACT.multiply(quantile, fixed[-1][1])
    position = next((at for at, (_, count) in enumerate(fixed[:-1]) if count >= rank), None)
    if position is None:
        return fixed[-2][0]  # rank falls in +Inf: the upper bound of the last finite bucket
    end, count = fixed[position]
    if position == 0 and end <= _ZERO:
        return end
    start, below = (_ZERO, _ZERO) if position == 0 else fixed[position - 1]
    return start, end, _EXACT.subtract(rank, below), _EXACT.subtract(count, below)


def histogram_quantile(quantile: Decimal, buckets: Buckets) -> Decimal | None:
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


def exceeds_objective(buckets: Buckets, slo_p99_ms: Decimal) -> bool:
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


def interval_breached(buckets: Buckets, *, slo_p99_ms: Decimal, min_requests: int) -> bool:
    """docs/pricing.md rule 4: an interval breaches its service's objective when it has at
    least `min_requests` requests and its own P99 is strictly above `slo_p99_ms`."""
    if not buckets or buckets[-1][1] < min_requests:
        return False
    return exceeds_objective(buckets, slo_p99_ms)
