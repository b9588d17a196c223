"""The stored-P99 breach counts are the kernel's rule evaluated by the database
(docs/pricing.md rule 4): the same SQL, and the same rows, as the test written out."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db.models import BooleanField, ExpressionWrapper, F, Q, Value
from django.db.models.lookups import GreaterThan

from kernel.breach import p99_breached
from metering.models import LatencyInterval
from reports.selectors import stored_p99_breach_condition
from tests.factories import T0, LatencyIntervalFactory, ServiceFactory

MIN_REQUESTS = 100
SLO_MS = 300
# (requests, stored P99 in seconds): one request short, exactly enough; at the objective,
# a hair above it, well above, and no P99 at all.
BOUNDARY_ROWS = [
    (MIN_REQUESTS - 1, Decimal("0.5")),
    (MIN_REQUESTS - 1, Decimal("0.3")),
    (MIN_REQUESTS, Decimal("0.3")),
    (MIN_REQUESTS, Decimal("0.3000000000000000000001")),
    (MIN_REQUESTS, Decimal("0.5")),
    (MIN_REQUESTS, Decimal("0.2999999999999999999999")),
    (MIN_REQUESTS, None),
    (MIN_REQUESTS + 1, Decimal("0.3001")),
    (0, None),
]
# Rows 3, 4 and 7 breach: enough requests and strictly above 300 ms.
EXPECTED_BREACHING = {3, 4, 7}


def written_out(slo_p99_ms):
    """The condition as the selectors wrote it before the kernel owned it."""
    return Q(request_count__gte=MIN_REQUESTS) & GreaterThan(F("p99_seconds") * 1000, slo_p99_ms)


@pytest.fixture
def rows(db) -> list[LatencyInterval]:
    service = ServiceFactory(slo_p99_ms=SLO_MS)
    return [
        LatencyIntervalFactory(
            service=service,
            interval_start=T0 + dt.timedelta(minutes=5 * i),
            request_count=requests,
            p99_seconds=p99,
        )
        for i, (requests, p99) in enumerate(BOUNDARY_ROWS)
    ]


@pytest.mark.parametrize("slo", [F("service__slo_p99_ms"), Value(SLO_MS)])
def test_it_builds_the_same_sql_as_the_condition_written_out(db, slo):
    ours = LatencyInterval.objects.filter(stored_p99_breach_condition(slo, MIN_REQUESTS)).query
    theirs = LatencyInterval.objects.filter(written_out(slo)).query
    assert str(ours) == str(theirs)


@pytest.mark.parametrize("slo", [F("service__slo_p99_ms"), Value(SLO_MS)])
def test_it_selects_the_same_boundary_rows(rows, slo):
    def breaching(condition) -> set[int]:
        annotated = LatencyInterval.objects.annotate(
            breached=ExpressionWrapper(condition, output_field=BooleanField())
        )
        picked = set(annotated.filter(breached=True).values_list("pk", flat=True))
        assert picked == set(LatencyInterval.objects.filter(condition).values_list("pk", flat=True))
        return picked

    expected = {rows[i].pk for i in EXPECTED_BREACHING}
    assert breaching(stored_p99_breach_condition(slo, MIN_REQUESTS)) == expected
    assert breaching(written_out(slo)) == expected


def test_it_evaluates_the_same_rule_in_python():
    decided = {
        i
        for i, (requests, p99) in enumerate(BOUNDARY_ROWS)
        if p99_breached(
            requests=requests, p99_seconds=p99, slo_p99_ms=SLO_MS, min_requests=MIN_REQUESTS
        )
    }
    assert decided == EXPECTED_BREACHING
    assert (
        p99_breached(
            requests=Decimal(MIN_REQUESTS),
            p99_seconds=Decimal("0.3"),
            slo_p99_ms=Decimal("299.999"),
            min_requests=MIN_REQUESTS,
        )
        is True
    )
