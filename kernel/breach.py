"""The SLA breach test on a P99 already computed (docs/pricing.md rule 4).

An interval breaches its service's objective when it had at least `min_requests` requests and
its P99, in seconds, times 1000 is strictly above the objective in milliseconds. The engine
decides this from the buckets exactly (`kernel.histogram.interval_breached`); the readers decide
it on the P99 stored at ingest, in SQL over a month of intervals, or in Python on a P99 computed
from the buckets of a row stored without one.

The rule is written once, over three operations a caller may replace: Python evaluates it on
numbers, and the database evaluates the same rule when a selector passes column expressions
and comparison builders (`GreaterThanOrEqual`, `GreaterThan`, `&`), so the kernel imports no
Django. Either way the comparisons, their boundaries and their order are these ones.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

# Seconds to milliseconds. An int, so that the SQL multiplies by the literal 1000.
MILLISECONDS_PER_SECOND = 1000


def _both(enough: Any, slow: Any) -> bool:
    return bool(enough and slow)


def enough_requests(
    requests: Any, min_requests: Any, *, at_least: Callable[[Any, Any], Any] = operator.ge
) -> Any:
    """The first half of the test: the interval had at least `min_requests` requests (an
    interval with fewer is never judged). Readers also use it to pick the rows stored without
    a P99 that may breach."""
    return at_least(requests, min_requests)


def p99_breached(
    *,
    requests: Any,
    p99_seconds: Any,
    slo_p99_ms: Any,
    min_requests: Any,
    at_least: Callable[[Any, Any], Any] = operator.ge,
    above: Callable[[Any, Any], Any] = operator.gt,
    both: Callable[[Any, Any], Any] = _both,
) -> Any:
    """`requests >= min_requests` and `p99_seconds * 1000 > slo_p99_ms`.

    On numbers, a P99 of None (no requests, or no finite bucket) is no breach, as a NULL P99
    makes the SQL comparison NULL, which a filter or a `CASE` reads as false. A selector passes
    `F(...)`/`Value(...)` operands with `at_least=GreaterThanOrEqual`, `above=GreaterThan` and
    `both=operator.and_` to get the same rule as a SQL condition.
    """
    if p99_seconds is None:
        return False
    enough = enough_requests(requests, min_requests, at_least=at_least)
    slow = above(p99_seconds * MILLISECONDS_PER_SECOND, slo_p99_ms)
    return both(enough, slow)
