"""The three health cards, built once for the dashboards' overview and the monthly report.

A card is a title, this period's number and the previous period's (raw, in `unit`, and as
text), the status the health module read from the pair (better, worse, unchanged, unknown) and
a line of explanation. The pages differ only in how they draw it, and in what a missing number
reads as (`empty`: an en dash on the dashboards, "n/a" in the monthly report and its PDF).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from reports import formatting, health


@dataclass(frozen=True)
class HealthCard:
    title: str
    value: Decimal | None
    previous_value: Decimal | None
    unit: str  # of `value`: "ratio", "ms" or "s"
    shown: str  # `value` as text, with its unit
    shown_previous: str
    status: str  # a health.Direction value
    explanation: str


def _worst_service(services: list[health.ServiceLatency]) -> health.ServiceLatency | None:
    """The measured service furthest above (or least below) its SLO, relative to the SLO."""
    measured = [s for s in services if s.p99_ms is not None]
    return max(measured, key=lambda s: s.p99_ms / s.slo_p99_ms, default=None)


def _latency_card(
    before: health.HealthNumbers, after: health.HealthNumbers, status: str, empty: str
) -> HealthCard:
    measured = [s for s in after.services if s.p99_ms is not None]
    met = [s for s in measured if s.meets_slo]
    worst = _worst_service(after.services)
    worst_before = next(
        (s for s in before.services if worst and s.service_id == worst.service_id), None
    )
    explanation = "no key service had traffic"
    if worst:
        explanation = (
            f"{worst.service} (SLO {worst.slo_p99_ms} ms); "
            f"{len(met)} of {len(measured)} services met their SLO"
        )
    value = worst.p99_ms if worst else None
    previous = worst_before.p99_ms if worst_before else None
    return HealthCard(
        title="P99 latency, worst key service",
        value=value,
        previous_value=previous,
        unit="ms",
        shown=formatting.milliseconds(value, empty=empty),
        shown_previous=formatting.milliseconds(previous, empty=empty),
        status=status,
        explanation=explanation,
    )


def health_cards(
    *,
    before: health.HealthNumbers,
    after: health.HealthNumbers,
    verdict: health.Verdict,
    empty: str = formatting.DASH,
) -> list[HealthCard]:
    """Effective utilization, the worst key service's P99, the mean wait: after vs before."""
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
            explanation="busy GPU-seconds / capacity GPU-seconds",
        ),
        _latency_card(before, after, str(verdict.latency), empty),
        HealthCard(
            title="Average wait before running",
            value=wait,
            previous_value=previous_wait,
            unit="s",
            shown=formatting.duration(wait, empty=empty),
            shown_previous=formatting.duration(previous_wait, empty=empty),
            status=str(verdict.wait),
            explanation=f"over {after.waits.overall.waits} scheduling attempts",
        ),
    ]
