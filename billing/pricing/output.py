"""The result as the JSON of pricing.md (and worked-example/expected.json)."""

from __future__ import annotations

from billing.pricing.money import format_money
from billing.pricing.result import PricingResult

GPU_TIME_LINES = ("baseline", "standard", "offpeak")


def result_to_dict(result: PricingResult) -> dict:
    """The output JSON of `price_scenario`: amounts as strings with two decimals (rounded),
    rates as the exact decimal text, teams by name with their lines in alphabetical key order
    (lines with nothing to charge left out), every platform line present, breaches ordered
    tightest objective first, then by service and interval."""
    currency = result.currency
    return {
        "rates": {
            "standard_per_gpu_hour": str(result.rates.standard_per_gpu_hour),
            "offpeak_training_per_gpu_hour": str(result.rates.offpeak_training_per_gpu_hour),
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
