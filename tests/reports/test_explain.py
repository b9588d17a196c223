"""Explain a charge: the tasks behind a line, their intervals, the PromQL and time range."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.urls import reverse

from billing.models import StatementLine
from metering.models import IngestQueries, IngestWindow
from tests.pools import reports as pools


def line_of(team: str, kind: str) -> StatementLine:
    return StatementLine.objects.get(
        statement__team__name=team, statement__period=pools.PERIOD, kind=kind, is_correction=False
    )


def explain(client, line: StatementLine, **params) -> object:
    return client.get(reverse("reports:explain", args=[line.pk]), params)


def offpeak_intervals() -> list[dt.datetime]:
    return [i for i in pools.OCTOBER_INTERVALS if not pools.is_peak(i)]


def test_it_lists_the_tasks_intervals_and_promql_behind_an_offpeak_line(
    people, report_pool
) -> None:
    line = line_of("vision", "offpeak")
    data = explain(people["finance"], line, format="json").json()

    assert data["amount"] == str(line.amount)
    assert Decimal(data["contributions_sum"]) == line.amount_unrounded
    (task,) = data["contributors"]
    assert task["task"] == "vit-pretrain"
    assert task["selection"] == "off-peak intervals"
    assert task["intervals"] == len(offpeak_intervals())
    assert Decimal(task["alloc_gpu_seconds"]) == 600 * len(offpeak_intervals())
    assert Decimal(task["alloc_gpu_seconds"]) == Decimal(task["gpu_seconds"])
    assert task["first_interval"] == "2026-09-30T19:00:00Z"
    (query,) = data["queries"]
    assert query["meter"] == "devices" and query["recorded"] is True
    assert query["promql"] == "sum by (namespace, pod) (recorded_allocation)"
    assert (query["start"], query["end"]) == ("2026-09-30T16:05:00Z", "2026-10-31T16:00:00Z")
    assert query["step_seconds"] == 300
    assert data["ingest_windows"] == 31 * 24  # the pool's 12 hours and the rest of October


def test_it_reads_the_promql_windows_written_before_runs_recorded_it_once_kept(
    people, report_pool
) -> None:
    windows = IngestWindow.objects.filter(source=report_pool.source)
    windows.update(queries=pools.QUERIES, measured_with=None)  # as migration 0014 found them
    IngestQueries.objects.filter(source=report_pool.source).delete()

    data = explain(people["finance"], line_of("vision", "offpeak"), format="json").json()
    (query,) = data["queries"]
    assert query["recorded"] is True
    assert query["promql"] == "sum by (namespace, pod) (recorded_allocation)"


def test_it_shows_one_task_interval_by_interval(people, report_pool) -> None:
    line = line_of("vision", "offpeak")
    task = report_pool.tasks["vit-pretrain"]
    data = explain(people["finance"], line, format="json", task=task.pk).json()
    rows = data["contributors"][0]["interval_usage"]
    assert [row["interval_start"] for row in rows] == [
        i.isoformat().replace("+00:00", "Z") for i in offpeak_intervals()
    ]
    html = explain(people["finance"], line, task=task.pk).content.decode()
    assert "vit-pretrain: intervals counted for this line" in html
    assert "recorded_allocation" in html


def test_it_lists_the_preemptions_behind_compensation(people, report_pool) -> None:
    data = explain(people["finance"], line_of("vision", "compensation"), format="json").json()
    (task,) = data["contributors"]
    assert len(task["preemptions"]) == 5
    (query,) = data["queries"]
    assert query["meter"] == "identity" and query["recorded"] is False
    assert "PreemptionByScheduler" in query["promql"]


def test_it_explains_a_team_lead_their_own_lines_only(people, report_pool) -> None:
    assert explain(people["lead"], line_of("search", "baseline")).status_code == 200
    assert explain(people["lead"], line_of("vision", "offpeak")).status_code == 404
    assert explain(people["nobody"], line_of("search", "baseline")).status_code == 404
