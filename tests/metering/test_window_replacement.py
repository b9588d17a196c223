"""A window is never replaced by less data without an operator saying so: re-ingested from a
Prometheus that lost its samples, a closed month keeps its rows, verifies, and gets no
correction; `ingest --accept-loss --reason` (or the admin action, after a confirmation page)
replaces them, and the audit log says who and why. Against a real Prometheus back-filled with
promtool and a second, empty one (tests/metering/jobs.py)."""

from __future__ import annotations

import getpass

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError

from audit.models import AuditEntry
from billing.models import StatementLine
from billing.services import price_book_ensure_default
from metering.models import IngestWindow, Source, UsageInterval
from tests.factories import windows_complete
from tests.helpers import command_output
from tests.metering.jobs import (  # noqa: F401 (fixtures)
    ALPHA_START,
    BETA_START,
    NAMESPACES_END,
    empty_prometheus,
    ingest_command,
    jobs_prometheus,
    jobs_source,
    jobs_tsdb,
)

REASON = "TSDB volume lost in the node-3 disk failure (INC-4411); samples are gone for good"


def october_usage() -> list[tuple]:
    return list(
        UsageInterval.objects.filter(interval_start__lt=BETA_START)
        .order_by("interval_start", "task_id")
        .values_list("task_id", "interval_start", "alloc_gpu_seconds", "busy_gpu_seconds")
    )


def october_windows() -> list[tuple]:
    return list(
        IngestWindow.objects.filter(start__gte=ALPHA_START, start__lt=BETA_START)
        .order_by("start")
        .values_list("start", "status", "completeness", "rows_written", "content_hash")
    )


def closed_october_then_prometheus_lost(jobs_url: str, empty_url: str) -> Source:
    """October ingested and closed, November ingested; then the source's Prometheus is an
    empty one (a new TSDB behind the same name)."""
    price_book_ensure_default()
    source = jobs_source(jobs_url)
    ingest_command(ALPHA_START, NAMESPACES_END)
    windows_complete(periods=["2026-10", "2026-11"])  # the rest of both months, ingested before
    assert "closed 2026-10" in command_output("close_period", "--period", "2026-10")
    Source.objects.filter(pk=source.pk).update(url=empty_url)
    return source


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_a_closed_months_rows_when_prometheus_lost_them(
    jobs_prometheus,  # noqa: F811
    empty_prometheus,  # noqa: F811
) -> None:
    closed_october_then_prometheus_lost(jobs_prometheus.url, empty_prometheus.url)
    usage, windows = october_usage(), october_windows()
    assert len(usage) == 2 and len(windows) == 12

    output = ingest_command(ALPHA_START, BETA_START)

    assert "warning: 12 windows kept their stored rows" in output
    assert october_usage() == usage
    assert october_windows() == windows
    for warnings in IngestWindow.objects.filter(
        start__gte=ALPHA_START, start__lt=BETA_START
    ).values_list("warnings", flat=True):
        assert warnings[0].startswith("kept the stored rows: ")
        assert "completeness 0.000000 (stored 1.000000" in warnings[0]
    assert "2026-10: no difference" in command_output("verify_period", "--period", "2026-10")
    closed = command_output("close_period", "--period", "2026-11")
    assert "closed 2026-11" in closed
    assert "corrections" not in closed
    assert not StatementLine.objects.filter(is_correction=True).exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_it_replaces_rows_with_less_only_when_an_operator_accepts_the_loss(
    jobs_prometheus,  # noqa: F811
    empty_prometheus,  # noqa: F811
) -> None:
    closed_october_then_prometheus_lost(jobs_prometheus.url, empty_prometheus.url)
    with pytest.raises(CommandError, match="--accept-loss and --reason go together"):
        ingest_command(ALPHA_START, BETA_START, "--accept-loss")
    assert len(october_usage()) == 2

    ingest_command(ALPHA_START, BETA_START, "--accept-loss", "--reason", REASON, "--batch", "12")

    assert october_usage() == []
    assert set(
        IngestWindow.objects.filter(start__gte=ALPHA_START, start__lt=BETA_START).values_list(
            "status", "completeness"
        )
    ) == {("done", 0)}
    entry = AuditEntry.objects.get(object_type="metering.ingestwindow", action="change")
    assert entry.changes["accepted_by"] == f"{getpass.getuser()} (manage.py ingest --accept-loss)"
    assert entry.changes["reason"] == REASON
    assert [w["completeness"] for w in entry.changes["windows"]] == [["1.000000", "0.000000"]] * 12
    assert entry.changes["windows"][0]["rows_written"] == [3, 0]
    # A correction comes only from windows at or above the completeness required.
    closed = command_output("close_period", "--period", "2026-11")
    withheld = "corrections withheld (windows below the completeness required, or GPUs metered"
    assert f"{withheld} by two sources): 2026-10" in closed
    assert not StatementLine.objects.filter(is_correction=True).exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_it_replaces_rows_with_less_from_the_admin_after_a_confirmation(
    client,
    jobs_prometheus,  # noqa: F811
    empty_prometheus,  # noqa: F811
) -> None:
    closed_october_then_prometheus_lost(jobs_prometheus.url, empty_prometheus.url)
    client.force_login(User.objects.create_superuser("ops-anna", "anna@example.com", "pw"))
    ids = list(
        IngestWindow.objects.filter(start__gte=ALPHA_START, start__lt=BETA_START).values_list(
            "pk", flat=True
        )
    )
    action = {"action": "replace_accepting_loss", "_selected_action": ids}

    page = client.post("/admin/metering/ingestwindow/", action)
    assert page.status_code == 200
    assert "Replace these windows' rows with less data?" in page.content.decode()
    assert len(october_usage()) == 2  # asking is not doing
    unexplained = client.post("/admin/metering/ingestwindow/", {**action, "confirm": "yes"})
    assert "This field is required" in unexplained.content.decode()
    assert len(october_usage()) == 2

    done = client.post(
        "/admin/metering/ingestwindow/", {**action, "confirm": "yes", "reason": REASON}
    )

    assert done.status_code == 302
    assert october_usage() == []
    entry = AuditEntry.objects.get(object_type="metering.ingestwindow", action="change")
    assert (entry.actor, entry.changes["accepted_by"]) == ("ops-anna", "ops-anna")
    assert entry.changes["reason"] == REASON
