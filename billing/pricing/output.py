"""The result as the JSON of docs/pricing.md (and worked-example/expected.json)."""

from __future__ import annotations

from billing.pricing.money import format_money, hours
from billing.pricing.result import PricingResult, Rates, TeamResult

GPU_TIME_LINES = ("baseline", "standard", "offpeak")


def result_to_dict(result: PricingResult) -> dict:
    """The output JSON of `price_scenario`: amounts as strings with two decimals (rounded),
    rates as the exact decimal text (`rates` is the `default` class's, `rates_by_class` every
    class of the book by name), capacity per class in GPU-hours (2 places), teams by name with
    their lines in alphabetical key order (lines with nothing to charge left out) and their
    GPU-hours per class, every platform line present, breaches ordered tightest objective
    first, then by service and interval."""
    currency = result.currency
    return {
        "rates": _rates(result.rates),
        "rates_by_class": {rates.gpu_class: _rates(rates) for rates in result.rates_by_class},
        "capacity_gpu_hours_by_class": {
            name: str(hours(seconds)) for name, seconds in result.capacity_gpu_seconds_by_class
        },
        "pool_cost": format_money(result.pool_cost_rounded, currency),
        "teams": {
            team.team: {
                "lines": {
                    line.kind: format_money(line.rounded, currency)
                    for line in sorted(team.lines, key=lambda line: line.kind)
                },
                "quantities_gpu_hours": {
                    line.kind: str(line.gpu_hours)
                    for line in sorted(team.lines, key=lambda line: line.kind)
                    if line.kind in GPU_TIME_LINES
                },
                "quantities_gpu_hours_by_class": _quantities_by_class(team),
                "total": format_money(team.total, currency),
            }
            for team in result.teams
        },
        "platform": {
            "total": format_money(result.platform.total, currency),
            "lines": {
                line.kind: format_money(line.rounded, currency) for line in result.platform.lines
            },
        },
        "sla_breaches": [
            {"service": breach.service, "interval": breach.interval_name}
            for breach in result.sla_breaches
        ],
    }


def _rates(rates: Rates) -> dict:
    return {
        "standard_per_gpu_hour": str(rates.standard_per_gpu_hour),
        "offpeak_training_per_gpu_hour": str(rates.offpeak_training_per_gpu_hour),
    }


def _quantities_by_class(team: TeamResult) -> dict:
    """class -> GPU-time line -> GPU-hours (2 places), for the classes the team used."""
    by_class: dict[str, dict[str, str]] = {}
    for line in sorted(team.lines, key=lambda line: line.kind):
        if line.kind in GPU_TIME_LINES:
            for part in line.by_class:
                by_class.setdefault(part.gpu_class, {})[line.kind] = str(part.gpu_hours)
    return {name: by_class[name] for name in sorted(by_class)}
