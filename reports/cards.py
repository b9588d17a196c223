"""The three health cards, built once for the dashboards' overview and the monthly report.

A card is a title, this period's number and the previous period's (raw, and as text), the
status the health module read from the pair (better, worse, unchanged, unknown) and a line of
explanation. The wording is the monthly report's, as management has read it since the first
report (and as its PDF still reads): utilization in percent, the key services within their P99
SLO counted, the mean wait in minutes. Both pages list each service's P99 in ms right below the
cards, so the count never hides a number.

The pages differ only in how they draw a card and in two words the caller chooses: what a
missing number reads as (`empty`: an en dash on the dashboards, "n/a" in the monthly report
and its PDF) and what the numbers span (`span`: the dashboards' chosen range, the report's
month).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from reports import formatting, health

NO_TRAFFIC = "no traffic"


@dataclass(frozen=True)
class HealthCard:
    title: str
    value: Decimal | None
    previous_value: Decimal | None
    unit: str  # of `value`: "ratio", "services" (within their SLO) or "s"
    shown: str  # `value` as text, with its unit
    shown_previous: str
    status: str  # a health.Direction value
    explanation: str


def _within_slo(services: list[health.ServiceLatency]) -> tuple[Decimal | None, str]:
    """How many measured key services met their P99 SLO, and that as "2 of 3"."""
    measured = [s for s in services if s.p99_ms is not None]
    if not measured:
        return None, NO_TRAFFIC
    met = sum(1 for s in measured if s.meets_slo)
    return Decimal(met), f"{met} of {len(measured)}"


def _latency_card(
    before: health.HealthNumbers, after: health.HealthNumbers, status: str, span: str
) -> HealthCard:
    value, shown = _within_slo(after.services)
    previous, shown_previous = _within_slo(before.services)
    explanation = f"P99 from the {span}'s merged histogram buckets, per service below"
    moved = _p99_moved(before.services, after.services, status)
    return HealthCard(
        title="Services within P99 SLO",
        value=value,
        previous_value=previous,
        unit="services",
        shown=shown,
        shown_previous=shown_previous,
        status=status,
        explanation=f"{moved}; {explanation}" if moved else explanation,
    )


def _p99_moved(
    before: list[health.ServiceLatency], after: list[health.ServiceLatency], status: str
) -> str:
    """What made the card better or worse, which its count need not show ("2 of 2", worse):
    the service whose P99 moved furthest that way ("ads/chat P99 from 4,843 ms to 8,741 ms"),
    and how many more moved so. Empty where the card is unchanged or unknown."""
    if status not in (health.Direction.WORSE, health.Direction.BETTER):
        return ""
    earlier = {s.service_id: s for s in before}
    moved = [
        (s.p99_ms / earlier[s.service_id].p99_ms, earlier[s.service_id], s)
        for s in after
        if s.service_id in earlier
        and health.latency_direction([earlier[s.service_id]], [s]) == status
        and earlier[s.service_id].p99_ms  # a P99 of 0 before: no ratio to rank it by
    ]
    if not moved:
        return ""
    pick = max if status == health.Direction.WORSE else min
    _, was, now = pick(moved, key=lambda move: move[0])
    said = (
        f"{now.service} P99 from {formatting.milliseconds(was.p99_ms)}"
        f" to {formatting.milliseconds(now.p99_ms)}"
    )
    if len(moved) > 1:
        said += f", {len(moved) - 1} more {status}"
    return said


def health_cards(
    *,
    before: health.HealthNumbers,
    after: health.HealthNumbers,
    verdict: health.Verdict,
    empty: str = formatting.DASH,
    span: str = "range",
) -> list[HealthCard]:
    """Effective utilization, the key services within their P99 SLO, the mean wait: after
    vs before."""
    utilization, previous_utilization = after.utilization.effective, before.utilization.effective
    wait, previous_wait = after.waits.overall.mean_seconds, before.waits.overall.mean_seconds
    return [
        HealthCard(
            title="Effective utilization",
            value=utilization,
            previous_value=previous_utilization,
            unit="ratio",
            shown=formatting.percent(utilization, empty=empty),
            shown_previous=formatting.percent(previous_utilization, empty=empty),
            status=str(verdict.utilization),
            explanation="busy GPU-seconds / GPU-seconds present",
        ),
        _latency_card(before, after, str(verdict.latency), span),
        HealthCard(
            title="Mean wait before running",
            value=wait,
            previous_value=previous_wait,
            unit="s",
            shown=formatting.minutes(wait, empty=empty),
            shown_previous=formatting.minutes(previous_wait, empty=empty),
            status=str(verdict.wait),
            explanation=_wait_explanation(before.waits, after.waits),
        ),
    ]


def _wait_explanation(before: health.Waits, after: health.Waits) -> str:
    said = f"{after.overall.waits} scheduling attempts"
    said += _gave_up_said(after)
    admitted = sum(a.waits for a in after.admissions.values())
    if admitted:
        said += f", with the wait of {admitted} workloads Kueue admitted"
    if not health.gave_up_comparable(before, after):
        said += "; not compared: one period was closed before pods that gave up were counted"
    elif not health.comparable_waits(before, after):
        said += "; not compared: Kueue's queue was not read in all of both periods"
    return said


def _gave_up_said(waits: health.Waits) -> str:
    """How many of the waits ended with the pod gone, never scheduled (its wait counts to
    when it was last seen Pending); nothing where none did."""
    gave_up = waits.overall.gave_up
    if gave_up is None:
        return " (closed before pods that gave up waiting were counted)"
    if not gave_up:
        return ""
    return f", {gave_up} of {waits.pods_waited} pods gave up waiting"
