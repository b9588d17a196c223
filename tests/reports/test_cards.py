"""One health-card builder and one set of formatters for the overview and the monthly report."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from reports import formatting, health
from reports.cards import health_cards


def numbers(
    *, busy: str, p99_ms: str | None, waits: int, wait_seconds: str
) -> health.HealthNumbers:
    service = health.ServiceLatency(
        service_id=1,
        service="search/api",
        team="search",
        slo_p99_ms=300,
        p99_ms=None if p99_ms is None else Decimal(p99_ms),
        requests=Decimal(200),
        intervals=12,
        breached_intervals=0,
    )
    return health.HealthNumbers(
        utilization=health.Utilization(
            busy_gpu_seconds=Decimal(busy), capacity_gpu_seconds=Decimal(1000)
        ),
        services=[service],
        waits=health.Waits(
            per_kind={
                "inference": health.MeanWait(waits=waits, total_seconds=Decimal(wait_seconds))
            }
        ),
    )


def test_it_builds_the_same_cards_for_both_pages_but_the_placeholder() -> None:
    before = numbers(busy="0", p99_ms=None, waits=0, wait_seconds="0")
    after = numbers(busy="423.6", p99_ms="412.4", waits=4, wait_seconds="490")
    verdict = health.verdict(before, after)

    dashboard = health_cards(before=before, after=after, verdict=verdict)
    report = health_cards(before=before, after=after, verdict=verdict, empty="n/a", span="month")

    assert [(c.title, c.shown, c.shown_previous, c.status) for c in dashboard] == [
        ("Effective utilization", "42.4 %", "0.0 %", "better"),
        ("Services within P99 SLO", "0 of 1", "no traffic", "unknown"),
        ("Mean wait before running", "2.0 min", "\u2013", "unknown"),
    ]
    assert [c.shown_previous for c in report] == ["0.0 %", "no traffic", "n/a"]
    assert [c.shown for c in report] == [c.shown for c in dashboard]
    assert [c.explanation for c in report] == [
        "busy GPU-seconds / GPU-seconds present",
        "P99 from the month's merged histogram buckets, per service below",
        "4 scheduling attempts",
    ]
    assert dashboard[1].explanation == (
        "P99 from the range's merged histogram buckets, per service below"
    )
    assert (dashboard[1].value, dashboard[1].unit) == (Decimal(0), "services")


def _services(*p99s: str | None) -> list[health.ServiceLatency]:
    return [
        health.ServiceLatency(
            service_id=n,
            service=f"team-{n}/chat",
            team=f"team-{n}",
            slo_p99_ms=10_000,
            p99_ms=None if p99 is None else Decimal(p99),
            requests=Decimal(200),
            intervals=12,
            breached_intervals=0,
        )
        for n, p99 in enumerate(p99s, start=1)
    ]


@pytest.mark.parametrize(
    ("before", "after", "status", "said"),
    [
        # Both within their SLO both months ("2 of 2" twice): the card says what got worse.
        (
            ("4843", "4200"),
            ("8741", "4990"),
            "worse",
            "team-1/chat P99 from 4,843 ms to 8,741 ms, 1 more worse; ",
        ),
        (
            ("4843", "4200"),
            ("8741", "4200"),
            "worse",
            "team-1/chat P99 from 4,843 ms to 8,741 ms; ",
        ),
        # One better and none worse: the one that improved most.
        (
            ("900", "4200"),
            ("450", "3000"),
            "better",
            "team-1/chat P99 from 900 ms to 450 ms, 1 more better; ",
        ),
        (("900", "4200"), ("910", "4200"), "unchanged", ""),
        (("900", None), ("910", "4200"), "unchanged", ""),
    ],
)
def test_it_says_which_service_moved_the_latency_card(before, after, status, said) -> None:
    earlier = numbers(busy="400", p99_ms=None, waits=1, wait_seconds="60")
    later = numbers(busy="400", p99_ms=None, waits=1, wait_seconds="60")
    earlier = dataclasses.replace(earlier, services=_services(*before))
    later = dataclasses.replace(later, services=_services(*after))
    verdict = health.verdict(earlier, later)
    card = health_cards(before=earlier, after=later, verdict=verdict, span="month")[1]
    assert (card.status, card.shown) == (status, f"{sum(p is not None for p in after)} of 2")
    assert (
        card.explanation
        == f"{said}P99 from the month's merged histogram buckets, per service below"
    )


@pytest.mark.parametrize(
    ("formatted", "expected"),
    [
        (formatting.money(Decimal("1234.505")), "1,234.51"),
        (formatting.money(Decimal("-0.005")), "-0.01"),
        (formatting.money(None), "\u2013"),
        (formatting.number(Decimal("2.5"), 0), "3"),
        (formatting.percent(Decimal("0.42355")), "42.4 %"),
        (formatting.percent(None, empty="n/a"), "n/a"),
        (formatting.gpu_hours_text(Decimal(5400)), "1.50"),
        (formatting.milliseconds(Decimal("1234.5")), "1,235 ms"),
        (formatting.duration(Decimal(42)), "42 s"),
        (formatting.duration(Decimal(210)), "3.5 min"),
        (formatting.duration(Decimal(7560)), "2.1 h"),
        (formatting.minutes(Decimal(30)), "0.5 min"),
        (formatting.minutes(Decimal(7560)), "126.0 min"),
        (formatting.kind_label("training_batch"), "Training (batch)"),
    ],
)
def test_it_formats_numbers_half_up_with_thousands(formatted: str, expected: str) -> None:
    assert formatted == expected
