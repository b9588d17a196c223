"""reports.charts: pure functions, rows in, a figure out, every axis named with its unit."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest

from reports import charts
from tests.helpers import off_site_urls

ZONE = "Asia/Shanghai"
T0 = dt.datetime(2026, 10, 1, 1, 0, tzinfo=dt.UTC)  # 09:00 in Shanghai
UNIT = re.compile(r"\(.+\)")


def hours(n: int) -> list[dt.datetime]:
    return [T0 + dt.timedelta(hours=i) for i in range(n)]


def every_chart() -> list[tuple[str, object, bool]]:
    """(name, figure, has a time axis) for each chart function, on a couple of literal rows."""
    timeline = [
        {
            "time": t,
            "capacity_gpus": Decimal(8),
            "busy_gpus": Decimal("5.5"),
            "allocated_gpus": {"inference": Decimal(3), "training_batch": Decimal(4)},
        }
        for t in hours(3)
    ]
    trajectory = [
        {
            "time": t,
            "alloc_gpus": Decimal(2),
            "busy_gpus": Decimal("1.5"),
            "memory_avg_gib": Decimal(30),
            "memory_peak_gib": Decimal(40),
            "read_mib": Decimal(5),
            "write_mib": Decimal(1),
            "preempted": i == 1,
        }
        for i, t in enumerate(hours(3))
    ]
    latency = [
        {"time": t, "p99_ms": Decimal(900 + 200 * i), "breached": i == 2}
        for i, t in enumerate(hours(3))
    ]
    return [
        ("capacity", charts.capacity_chart(timeline, timezone=ZONE), True),
        (
            "completeness",
            charts.completeness_chart(
                [{"day": dt.date(2026, 10, 1), "completeness": Decimal("0.97")}], timezone=ZONE
            ),
            False,
        ),
        (
            "profile",
            charts.daily_profile_chart(
                [
                    {"hour": h, "inference_gpus": Decimal(h % 5), "training_gpus": Decimal(2)}
                    for h in range(24)
                ],
                timezone=ZONE,
                peak_hours=[9, 22],
                suggested_peak_hours=(8, 21),
            ),
            False,
        ),
        (
            "cost",
            charts.cost_by_month_chart(
                [
                    {"period": "2026-10", "line": "standard", "amount": Decimal("10.00")},
                    {"period": "2026-10", "line": "sla_credit", "amount": Decimal("-2.00")},
                ],
                currency="CNY",
            ),
            False,
        ),
        (
            "usage",
            charts.usage_by_day_chart(
                [{"day": dt.date(2026, 10, 1), "kind": "inference", "gpu_hours": Decimal(5)}],
                timezone=ZONE,
            ),
            False,
        ),
        (
            "waits",
            charts.waits_chart(
                [
                    {
                        "kind": "training_batch",
                        "attempts": 3,
                        "average_seconds": Decimal(90),
                        "longest_seconds": Decimal(200),
                    }
                ]
            ),
            False,
        ),
        ("trajectory", charts.task_trajectory_chart(trajectory, timezone=ZONE), True),
        (
            "sla",
            charts.sla_latency_chart(latency, service="search/ranker", slo_ms=1000, timezone=ZONE),
            True,
        ),
        (
            "reconciliation",
            charts.reconciliation_chart(
                [
                    {"label": "search", "amount": Decimal("5.00")},
                    {"label": "Platform: idle capacity", "amount": Decimal("1.50")},
                ],
                currency="CNY",
            ),
            False,
        ),
        (
            "whatif",
            charts.whatif_chart(
                [{"team": "search", "difference": Decimal("-3.10")}],
                currency="CNY",
                draft_label="v2",
            ),
            False,
        ),
        (
            "rates",
            charts.price_rates_chart(
                [{"version": "v1", "standard": Decimal("14.374"), "offpeak": Decimal("12.074")}],
                currency="CNY",
            ),
            False,
        ),
    ]


@pytest.mark.parametrize(
    ("name", "figure", "timed"), every_chart(), ids=[c[0] for c in every_chart()]
)
def test_it_titles_every_chart_and_names_each_axis_with_its_unit(name, figure, timed) -> None:
    layout = figure.layout
    assert layout.title.text, name
    axes = [axis for key, axis in layout.to_plotly_json().items() if re.match(r"[xy]axis\d*$", key)]
    titled = [axis["title"]["text"] for axis in axes if axis.get("title", {}).get("text")]
    assert len(titled) >= 2, f"{name}: both axes need a title, got {titled}"
    # Value axes carry a unit; a category axis (team, month, task kind) has none to carry.
    assert any(UNIT.search(title) for title in titled), f"{name}: no unit in {titled}"
    if timed:
        assert any(ZONE in title for title in titled), f"{name}: no time zone on the time axis"


def test_it_draws_times_as_the_pools_wall_clock() -> None:
    figure = charts.capacity_chart(
        [{"time": T0, "capacity_gpus": Decimal(8), "busy_gpus": Decimal(1), "allocated_gpus": {}}],
        timezone=ZONE,
    )
    capacity = next(trace for trace in figure.data if trace.name == "Capacity")
    # 01:00 UTC is 09:00 in Shanghai; plotly.js would ignore an offset, so none is sent.
    assert list(capacity.x) == ["2026-10-01T09:00:00"]  # local wall-clock time


def test_it_stacks_allocation_by_kind_in_a_fixed_order() -> None:
    rows = [
        {
            "time": T0,
            "capacity_gpus": Decimal(8),
            "busy_gpus": Decimal(1),
            "allocated_gpus": {"training_batch": Decimal(4), "inference": Decimal(3)},
        }
    ]
    figure = charts.capacity_chart(rows, timezone=ZONE)
    stacked = [trace.name for trace in figure.data if trace.stackgroup == "allocated"]
    assert stacked == ["Allocated: Inference", "Allocated: Training (batch)"]


def test_it_ends_the_reconciliation_waterfall_on_the_pool_cost_total() -> None:
    figure = charts.reconciliation_chart(
        [
            {"label": "search", "amount": Decimal("5.00")},
            {"label": "Platform: rounding", "amount": Decimal("0.01")},
        ],
        currency="CNY",
    )
    waterfall = figure.data[0]
    assert list(waterfall.y) == ["search", "Platform: rounding", "Pool cost"]
    assert list(waterfall.measure) == ["relative", "relative", "total"]


def test_it_marks_breached_intervals_apart_from_the_p99_line() -> None:
    rows = [
        {"time": T0, "p99_ms": Decimal(500), "breached": False},
        {"time": T0 + dt.timedelta(minutes=5), "p99_ms": Decimal(1500), "breached": True},
    ]
    figure = charts.sla_latency_chart(rows, service="s", slo_ms=1000, timezone=ZONE)
    breached = next(trace for trace in figure.data if trace.name == "Breached interval")
    assert list(breached.y) == [Decimal(1500)]


def test_it_embeds_a_figure_without_plotly_js_or_a_cdn() -> None:
    html = charts.to_html(charts.waits_chart([]))
    assert "plotly-graph-div" in html
    assert "cdn.plot.ly" not in html and "cdn.jsdelivr" not in html
    assert len(html) < 20_000  # plotly.js itself (megabytes) comes from our static files


def test_it_tells_an_off_site_url_from_the_letters_cdn_in_a_token() -> None:
    page = (
        '<script src="https://cdn.plot.ly/plotly.js"></script><link href="//cdn.example/a.css">'
        '<img SRC="HTTP://host/x.png"><a href="/reports/">reports</a>'
        '<input name="csrfmiddlewaretoken" value="g0ookjinxpcdnvm88">'
    )
    assert off_site_urls(page) == [
        "https://cdn.plot.ly/plotly.js", "//cdn.example/a.css", "HTTP://host/x.png"
    ]  # fmt: skip
    assert off_site_urls('<a href="/reports/">x</a> cdn') == []


def test_it_breaks_a_line_where_data_is_missing() -> None:
    times = [T0, T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(hours=2)]
    rows = [{"time": t, "p99_ms": Decimal(500), "breached": False} for t in times]
    figure = charts.sla_latency_chart(rows, service="s", slo_ms=1000, timezone=ZONE)
    line = next(trace for trace in figure.data if trace.name == "P99")
    # A gap point (no value) right after the last interval before the hole.
    assert list(line.y) == [Decimal(500), Decimal(500), None, Decimal(500)]
    assert line.x[2] == "2026-10-01T09:10:00"
