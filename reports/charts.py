"""Plotly figures for the dashboards and the report page: pure functions, rows in, `go.Figure` out.

No Django, no database, no clock: a view reads rows with a selector and hands them here, so a
chart can be tested with a handful of literal rows. Every figure carries a title, axis titles
with their units, and, on time axes, the pool's time zone. Times arrive as aware datetimes (UTC
from the database) and are shown as the pool's wall-clock time, because plotly.js ignores UTC
offsets and would otherwise draw UTC as if it were local.

Amounts arrive as `Decimal`; plotly's JSON encoder writes them as numbers, which is fine for
drawing: no amount shown as text on a page comes from a figure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from itertools import pairwise
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kernel.period import time_zone
from kernel.tasks import TASK_KIND_LABELS as KIND_LABELS
from kernel.tasks import TASK_KINDS

Row = Mapping[str, Any]

# One colour per task kind on every page, so a reader learns them once.
KIND_COLOURS = dict(zip(TASK_KINDS, ("#2563eb", "#f59e0b", "#d97706", "#a3a3a3"), strict=True))
LINE_COLOURS = {
    "baseline": "#1d4ed8",
    "standard": "#60a5fa",
    "offpeak": "#34d399",
    "sla_penalty": "#ef4444",
    "sla_credit": "#f472b6",
    "compensation": "#a78bfa",
}
LINE_LABELS = {
    "baseline": "Reserved inference baseline",
    "standard": "Usage, standard rate",
    "offpeak": "Usage, off-peak training rate",
    "sla_penalty": "SLA penalty",
    "sla_credit": "SLA credit",
    "compensation": "Starvation compensation",
}
CAPACITY_COLOUR = "#111827"
BUSY_COLOUR = "#16a34a"
BREACH_COLOUR = "#dc2626"
SLO_COLOUR = "#6b7280"


def _layout(figure: go.Figure, *, title: str, x_title: str, y_title: str) -> go.Figure:
    figure.update_layout(
        # The title at the very top, the legend in its own row between title and plot: neither
        # covers the other, whatever the number of series.
        title={
            "text": title,
            "x": 0,
            "xanchor": "left",
            "y": 0.98,
            "yanchor": "top",
            "font": {"size": 15},
        },
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 84, "b": 50},
        height=370,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
        hovermode="x unified",
        font={"family": "Inter, system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
    )
    figure.update_xaxes(title_text=x_title)
    figure.update_yaxes(title_text=y_title, rangemode="tozero")
    return figure


def _note_when_empty(figure: go.Figure, rows: Sequence[Row], note: str) -> go.Figure:
    """Say so on an empty chart, rather than show bare axes that look like a failure."""
    if not rows:
        figure.add_annotation(
            text=note,
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            font={"size": 14, "color": "#64748b"},
        )
    return figure


def time_axis_title(timezone: str) -> str:
    return f"Time ({timezone})"


def local_times(times: Iterable[dt.datetime], timezone: str) -> list[str]:
    """Wall-clock times in the pool's zone, as ISO text without offset: what plotly.js reads,
    and what plotly would turn a datetime into anyway (see `plotted`)."""
    zone = time_zone(timezone)
    return [moment.astimezone(zone).replace(tzinfo=None).isoformat() for moment in times]


def plotted(values: Iterable[Decimal | int | float | None]) -> list[float | None]:
    """Chart coordinates as the JSON numbers plotly.js draws.

    Plotly converts each Decimal to a float in its JSON encoder anyway, but value by value in
    Python, after validating and deep-copying the list: on a month of intervals (8,640 points
    a series) that took most of a page's time; converting once here draws the same chart for
    a fraction of it. These are GPUs, GiB, MiB and milliseconds, never money (the cost chart
    keeps its Decimals), and only drawing uses them: the table and CSV behind every chart keep
    the exact Decimals.
    """
    return [None if value is None else float(value) for value in values]


def with_gaps(rows: Sequence[Row]) -> list[Row]:
    """Rows with an empty row wherever time skips a step, so lines break over missing data
    instead of drawing a straight line across it. The step is the shortest spacing seen."""
    if len(rows) < 2:
        return list(rows)
    steps = [b["time"] - a["time"] for a, b in pairwise(rows)]
    step = min(steps)
    gapped: list[Row] = [rows[0]]
    for (previous, row), gap in zip(pairwise(rows), steps, strict=True):
        if gap > step:
            gapped.append({key: None for key in row} | {"time": previous["time"] + step})
        gapped.append(row)
    return gapped


def _ordered_kinds(kinds: Iterable[str]) -> list[str]:
    present = set(kinds)
    known = [kind for kind in KIND_LABELS if kind in present]
    return known + sorted(present - set(known))


def capacity_chart(rows: Sequence[Row], *, timezone: str, bucket_label: str = "hour") -> go.Figure:
    """Capacity vs allocated (stacked by task kind) vs busy, in average GPUs per bucket.

    Rows: `time` (aware datetime, start of the bucket), `capacity_gpus`, `busy_gpus`, and
    `allocated_gpus` as a mapping kind -> GPUs.
    """
    times = local_times((row["time"] for row in rows), timezone)
    kinds = _ordered_kinds(kind for row in rows for kind in row["allocated_gpus"])
    figure = go.Figure()
    for kind in kinds:
        figure.add_trace(
            go.Scatter(
                x=times,
                y=plotted(row["allocated_gpus"].get(kind, Decimal(0)) for row in rows),
                name=f"Allocated: {KIND_LABELS.get(kind, kind)}",
                stackgroup="allocated",
                mode="lines",
                line={"width": 0.5, "color": KIND_COLOURS.get(kind)},
            )
        )
    figure.add_trace(
        go.Scatter(
            x=times,
            y=plotted(row["busy_gpus"] for row in rows),
            name="Busy (utilization-weighted)",
            mode="lines",
            line={"color": BUSY_COLOUR, "width": 1.5, "dash": "dot"},
        )
    )
    figure.add_trace(
        go.Scatter(
            x=times,
            y=plotted(row["capacity_gpus"] for row in rows),
            name="Capacity",
            mode="lines",
            line={"color": CAPACITY_COLOUR, "width": 2, "shape": "hv"},
        )
    )
    _note_when_empty(figure, rows, "No capacity or usage in this range")
    return _layout(
        figure,
        title="Capacity, allocation by task kind, and busy GPUs",
        x_title=time_axis_title(timezone),
        y_title=f"GPUs (average per {bucket_label})",
    )


def completeness_chart(rows: Sequence[Row], *, timezone: str) -> go.Figure:
    """Share of expected samples that arrived, per day.

    Rows: `day` (date), `completeness` (0 to 1).
    """
    figure = go.Figure(
        go.Bar(
            x=[row["day"] for row in rows],
            y=[row["completeness"] * 100 for row in rows],
            marker_color=["#16a34a" if row["completeness"] >= 1 else "#f59e0b" for row in rows],
            name="Completeness",
        )
    )
    figure = _layout(
        figure,
        title="Data completeness per day",
        x_title=f"Day ({timezone})",
        y_title="Received (% of expected)",
    )
    figure.update_yaxes(range=[0, 105])
    # No legend row to make room for: a plot tall enough for its axis title (at 240 px with
    # the legend's margin it was 106 px high, and the title read "amples received (% of e").
    figure.update_layout(height=260, showlegend=False, margin={"t": 44})
    return figure


def daily_profile_chart(
    rows: Sequence[Row],
    *,
    timezone: str,
    peak_hours: Sequence[int] | None = None,
    suggested_peak_hours: Sequence[int] | None = None,
) -> go.Figure:
    """The 24-hour profile: average GPUs allocated per local hour, training vs inference.

    Rows: `hour` (0 to 23, local), `inference_gpus`, `training_gpus`. The price book's peak hours
    and the window suggested from the data are shaded, so the two can be compared at a glance.
    """
    hours = [row["hour"] for row in rows]
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=hours,
            y=[row["inference_gpus"] for row in rows],
            name="Inference",
            mode="lines+markers",
            line={"color": KIND_COLOURS["inference"], "width": 2.5},
        )
    )
    figure.add_trace(
        go.Scatter(
            x=hours,
            y=[row["training_gpus"] for row in rows],
            name="Training (all training kinds)",
            mode="lines+markers",
            line={"color": KIND_COLOURS["training_batch"], "width": 2.5},
        )
    )
    if peak_hours:
        figure.add_vrect(
            x0=peak_hours[0] - 0.5,
            x1=peak_hours[1] - 0.5,
            fillcolor="#fde68a",
            opacity=0.25,
            line_width=0,
            annotation_text="price book peak",
            annotation_position="top left",
        )
    if suggested_peak_hours:
        figure.add_vrect(
            x0=suggested_peak_hours[0] - 0.5,
            x1=suggested_peak_hours[1] - 0.5,
            line={"color": "#2563eb", "dash": "dash", "width": 1.5},
            fillcolor="rgba(0,0,0,0)",
            annotation_text="suggested peak",
            annotation_position="bottom left",
        )
    figure = _layout(
        figure,
        title="24-hour profile: training vs inference",
        x_title=f"Hour of day ({timezone})",
        y_title="GPUs allocated (average)",
    )
    figure.update_xaxes(tickmode="linear", dtick=2, range=[-0.5, 23.5])
    return figure


def cost_by_month_chart(rows: Sequence[Row], *, currency: str) -> go.Figure:
    """A team's cost per month, stacked by statement line. Rows: `period`, `line`, `amount`.

    Credits (negative lines) stack below zero, so the bar's net height is not the total: the
    total is drawn as a marker on top.
    """
    periods = sorted({row["period"] for row in rows})
    lines = [line for line in LINE_LABELS if any(row["line"] == line for row in rows)]
    lines += sorted({row["line"] for row in rows} - set(lines))
    amounts = {(row["period"], row["line"]): row["amount"] for row in rows}
    figure = go.Figure()
    for line in lines:
        figure.add_trace(
            go.Bar(
                x=periods,
                y=[amounts.get((period, line), Decimal(0)) for period in periods],
                name=LINE_LABELS.get(line, line),
                marker_color=LINE_COLOURS.get(line),
            )
        )
    totals = [
        sum((amounts.get((p, line), Decimal(0)) for line in lines), Decimal(0)) for p in periods
    ]
    figure.add_trace(
        go.Scatter(
            x=periods,
            y=totals,
            name="Total",
            mode="markers",
            marker={"symbol": "diamond", "size": 11, "color": CAPACITY_COLOUR},
        )
    )
    _note_when_empty(figure, rows, "No closed month yet: statements appear once a month closes")
    figure = _layout(
        figure, title="Cost per month, by line", x_title="Month", y_title=f"Amount ({currency})"
    )
    figure.update_layout(barmode="relative")
    figure.update_xaxes(type="category")
    figure.update_yaxes(rangemode="normal")
    return figure


def usage_by_day_chart(rows: Sequence[Row], *, timezone: str) -> go.Figure:
    """GPU-hours allocated per local day, stacked by task kind. Rows: `day`, `kind`, `gpu_hours`."""
    days = sorted({row["day"] for row in rows})
    kinds = _ordered_kinds(row["kind"] for row in rows)
    hours = {(row["day"], row["kind"]): row["gpu_hours"] for row in rows}
    figure = go.Figure()
    for kind in kinds:
        figure.add_trace(
            go.Bar(
                x=days,
                y=[hours.get((day, kind), Decimal(0)) for day in days],
                name=KIND_LABELS.get(kind, kind),
                marker_color=KIND_COLOURS.get(kind),
            )
        )
    _note_when_empty(figure, rows, "No usage in this range")
    figure = _layout(
        figure,
        title="GPU-hours allocated per day, by task kind",
        x_title=f"Day ({timezone})",
        y_title="Allocated (GPU-hours)",
    )
    figure.update_layout(barmode="stack")
    return figure


def _attempts_said(row: Row) -> str:
    gave_up = row.get("gave_up")
    said = f"{row['attempts']} scheduling attempts"
    return f"{said}, {gave_up} gave up waiting" if gave_up else said


def waits_chart(rows: Sequence[Row]) -> go.Figure:
    """Average and longest wait before running, per task kind. Rows: `kind`, `average_seconds`,
    `longest_seconds`, `attempts`, `gave_up` (of the attempts, the pods gone never scheduled;
    None: not counted); and, where Kueue admits workloads, `admission_seconds` (the part of
    the average spent in Kueue's queue, None for a kind it did not admit) and `admitted`: the
    average is then drawn as its two parts."""
    kinds = [KIND_LABELS.get(row["kind"], row["kind"]) for row in rows]
    queued = [row.get("admission_seconds") or 0 for row in rows]
    figure = go.Figure()
    figure.add_trace(
        go.Bar(
            x=kinds,
            y=[(row["average_seconds"] - q) / 60 for row, q in zip(rows, queued, strict=True)],
            name="Average wait to be scheduled" if any(queued) else "Average wait",
            marker_color=[KIND_COLOURS.get(row["kind"], "#6b7280") for row in rows],
            customdata=[_attempts_said(row) for row in rows],
            hovertemplate="%{y:.1f} min over %{customdata}<extra></extra>",
        )
    )
    if any(queued):
        figure.add_trace(
            go.Bar(
                x=kinds,
                y=[q / 60 for q in queued],
                name="Average wait in Kueue's queue",
                marker_color="#9ca3af",
                customdata=[row.get("admitted", 0) for row in rows],
                hovertemplate="%{y:.1f} min over %{customdata} admissions<extra></extra>",
            )
        )
        figure.update_layout(barmode="stack")
    figure.add_trace(
        go.Scatter(
            x=kinds,
            y=[row["longest_seconds"] / 60 for row in rows],
            name="Longest wait",
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 24, "color": "#111827"},
        )
    )
    _note_when_empty(figure, rows, "No pod's wait ended in this range")
    return _layout(
        figure,
        title="Wait before running, per task kind",
        x_title="Task kind",
        y_title="Wait (minutes)",
    )


def task_trajectory_chart(
    rows: Sequence[Row], *, timezone: str, bucket_label: str = "interval"
) -> go.Figure:
    """A task's whole life per interval (or hour), on three panels sharing the time axis.

    Rows: `time`, `alloc_gpus`, `busy_gpus`, `memory_avg_gib`, `memory_peak_gib`,
    `read_mib`, `write_mib` (per interval), and optionally `preempted` (bool).
    """
    rows = with_gaps(rows)
    times = local_times((row["time"] for row in rows), timezone)
    figure = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06)
    # (row key, legend name, line style, subplot row): GPUs on top, memory in the middle
    lines = (
        ("alloc_gpus", "Allocated GPUs", {"shape": "hv", "color": "#2563eb"}, 1),
        ("busy_gpus", "Busy GPUs", {"shape": "hv", "color": BUSY_COLOUR}, 1),
        ("memory_avg_gib", "Memory, average", {"color": "#7c3aed"}, 2),
        ("memory_peak_gib", "Memory, peak", {"color": "#c4b5fd", "dash": "dot"}, 2),
    )
    for key, name, line, subplot in lines:
        figure.add_trace(
            go.Scatter(
                x=times, y=plotted(r[key] for r in rows), name=name, mode="lines", line=line
            ),
            row=subplot,
            col=1,
        )
    figure.add_trace(
        go.Bar(
            x=times, y=plotted(r["read_mib"] for r in rows), name="Read", marker_color="#0891b2"
        ),
        row=3,
        col=1,
    )
    figure.add_trace(
        go.Bar(
            x=times, y=plotted(r["write_mib"] for r in rows), name="Written", marker_color="#f97316"
        ),
        row=3,
        col=1,
    )
    figure = _layout(
        figure,
        title=f"Task trajectory per {bucket_label}",
        x_title=time_axis_title(timezone),
        y_title="GPUs (average over the interval)",
    )
    figure.update_layout(height=680, barmode="stack")
    # Only the bottom panel shows the shared time axis title; each panel names its own unit.
    figure.update_xaxes(title_text=None)
    figure.update_xaxes(title_text=time_axis_title(timezone), row=3, col=1)
    figure.update_yaxes(title_text=f"GPUs (average per {bucket_label})", row=1, col=1)
    figure.update_yaxes(title_text="Memory (GiB)", row=2, col=1)
    figure.update_yaxes(title_text=f"I/O (MiB per {bucket_label})", row=3, col=1)
    for moment in local_times((r["time"] for r in rows if r.get("preempted")), timezone):
        figure.add_vline(x=moment, line={"color": BREACH_COLOUR, "width": 1, "dash": "dash"})
    return figure


def sla_latency_chart(
    rows: Sequence[Row], *, service: str, slo_ms: int, timezone: str
) -> go.Figure:
    """One service's P99 per interval against its SLO, breached intervals in red.

    Rows: `time`, `p99_ms` (None when the interval had no requests), `breached` (bool).
    """
    rows = with_gaps(rows)
    times = local_times((row["time"] for row in rows), timezone)
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=times,
            y=plotted(row["p99_ms"] for row in rows),
            name="P99",
            mode="lines",
            line={"color": "#2563eb", "width": 1.2},
            connectgaps=False,
        )
    )
    breached = [(t, row) for t, row in zip(times, rows, strict=True) if row["breached"]]
    figure.add_trace(
        go.Scatter(
            x=[t for t, _ in breached],
            y=plotted(row["p99_ms"] for _, row in breached),
            name="Breached interval",
            mode="markers",
            marker={"color": BREACH_COLOUR, "size": 7, "symbol": "x"},
        )
    )
    figure.add_hline(
        y=slo_ms,
        line={"color": SLO_COLOUR, "dash": "dash"},
        annotation_text=f"SLO {slo_ms} ms",
        annotation_position="top left",
    )
    _note_when_empty(figure, rows, "No requests in this range")
    return _layout(
        figure,
        title=f"{service}: P99 latency per interval vs SLO",
        x_title=time_axis_title(timezone),
        y_title="P99 latency (ms)",
    )


def reconciliation_chart(rows: Sequence[Row], *, currency: str) -> go.Figure:
    """A waterfall from nothing to the pool cost: each team's total, then the platform lines.

    Rows: `label`, `amount`; the last bar is the pool cost, drawn as a total, so a reader sees
    the parts add up to it.
    """
    labels = [row["label"] for row in rows]
    amounts = [row["amount"] for row in rows]
    # Horizontal, so long labels ("Platform: unassigned reservation") read without tilting.
    figure = go.Figure(
        go.Waterfall(
            orientation="h",
            y=[*labels, "Pool cost"],
            x=[*amounts, Decimal(0)],
            measure=[*(["relative"] * len(rows)), "total"],
            connector={"line": {"color": "#9ca3af", "width": 1}},
            increasing={"marker": {"color": "#3b82f6"}},
            decreasing={"marker": {"color": "#f472b6"}},
            totals={"marker": {"color": CAPACITY_COLOUR}},
            name="Amount",
        )
    )
    figure = _layout(
        figure,
        title="Pool reconciliation: teams plus platform equal pool cost",
        x_title=f"Amount ({currency})",
        y_title="Team or platform line",
    )
    figure.update_layout(
        showlegend=False,
        hovermode="closest",
        height=max(300, 140 + 28 * (len(rows) + 1)),
        margin={"t": 50, "l": 20},
    )
    figure.update_yaxes(autorange="reversed", automargin=True, rangemode="normal")
    return figure


def whatif_chart(rows: Sequence[Row], *, currency: str, draft_label: str) -> go.Figure:
    """Per-team difference if the period were priced with a draft price book.

    Rows: `team`, `difference` (draft minus actual).
    """
    figure = go.Figure(
        go.Bar(
            x=[row["team"] for row in rows],
            y=[row["difference"] for row in rows],
            marker_color=["#dc2626" if row["difference"] > 0 else "#16a34a" for row in rows],
            name="Difference",
        )
    )
    figure = _layout(
        figure,
        title=f"What if: {draft_label} minus the statements",
        x_title="Team",
        y_title=f"Difference in total ({currency})",
    )
    figure.update_layout(showlegend=False, hovermode="closest")
    figure.update_yaxes(rangemode="normal", zeroline=True, zerolinecolor="#111827")
    return figure


def price_rates_chart(rows: Sequence[Row], *, currency: str) -> go.Figure:
    """Derived rates per price book version. Rows: `version`, `standard`, `offpeak`."""
    versions = [row["version"] for row in rows]
    figure = go.Figure()
    figure.add_trace(
        go.Bar(
            x=versions,
            y=[row["standard"] for row in rows],
            name="Standard rate R",
            marker_color="#2563eb",
        )
    )
    figure.add_trace(
        go.Bar(
            x=versions,
            y=[row["offpeak"] for row in rows],
            name="Off-peak training rate R_off",
            marker_color="#34d399",
        )
    )
    figure = _layout(
        figure,
        title="Derived rates per price book version",
        x_title="Price book version (effective from)",
        y_title=f"Rate ({currency} per GPU-hour)",
    )
    figure.update_layout(barmode="group", hovermode="closest")
    figure.update_xaxes(type="category")
    return figure


def to_html(figure: go.Figure) -> str:
    """The figure as a `<div>` + script; plotly.js itself comes from our static files."""
    return figure.to_html(
        full_html=False,
        include_plotlyjs=False,
        config={"displaylogo": False, "responsive": True},
        default_width="100%",
    )
