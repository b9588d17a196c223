"""A task is its namespace's: same-named Jobs of two namespaces stay two teams' usage, and a
relabel moves only the intervals from the relabel on (audited). Through the public commands,
against a real Prometheus back-filled with promtool (tests/metering/jobs.py)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from access.services import role_assign
from audit.models import AuditEntry
from billing.models import Statement, StatementLineTask
from billing.services import price_book_ensure_default
from metering.models import Task, Team, UsageInterval
from tests.factories import windows_complete
from tests.helpers import command_output
from tests.metering.jobs import (  # noqa: F401 (fixtures)
    ALPHA_START,
    BETA_START,
    NAMESPACES_END,
    RELABEL_AT,
    RELABEL_END,
    RELABEL_START,
    ingest_command,
    iso,
    jobs_prometheus,
    jobs_source,
    jobs_tsdb,
)


def usage_by(group_by: str, start, end) -> dict[str, str]:
    report = json.loads(
        command_output(
            "usage_report", "--start", iso(start), "--end", iso(end), "--group-by", group_by
        )
    )
    return {group["group"]: group["alloc_gpu_hours"] for group in report["groups"]}


def lead_of(client, team: str):
    user = User.objects.create_user(f"lead-{team}", password="pw")
    role_assign(user=user, name="team_lead", teams=[Team.objects.get(name=team)])
    client.force_login(user)
    return client


def statements(period: str) -> dict[str, Decimal]:
    return dict(Statement.objects.filter(period=period).values_list("team__name", "total"))


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_same_named_jobs_of_two_namespaces_with_their_own_teams(jobs_prometheus) -> None:  # noqa: F811
    price_book_ensure_default()
    jobs_source(jobs_prometheus.url)
    ingest_command(ALPHA_START, BETA_START)  # Oct 31 (pool zone): alpha's trainer
    windows_complete(periods=["2026-10"])  # the rest of the month, ingested before
    assert "closed 2026-10" in command_output("close_period", "--period", "2026-10")
    october = statements("2026-10")
    october_tasks = sorted(
        StatementLineTask.objects.filter(line__statement__period="2026-10").values_list(
            "task__namespace", "task__external_id", "task__team__name", "gpu_seconds"
        )
    )

    ingest_command(BETA_START, NAMESPACES_END)  # Nov 1: beta's Job of the same name

    tasks = Task.objects.filter(external_id="trainer").order_by("namespace")
    assert [(t.namespace, t.team.name) for t in tasks] == [("alpha", "alpha"), ("beta", "beta")]
    assert usage_by("team", ALPHA_START, NAMESPACES_END) == {
        "alpha": "0.133333",
        "beta": "0.133333",
    }
    assert usage_by("task", ALPHA_START, NAMESPACES_END) == {
        "alpha/trainer": "0.133333",
        "beta/trainer": "0.133333",
    }
    assert "no difference" in command_output("verify_period", "--period", "2026-10")
    windows_complete(periods=["2026-11"])
    closed = command_output("close_period", "--period", "2026-11")
    assert "corrections of" not in closed
    assert set(october) == {"alpha"}
    assert statements("2026-10") == october
    assert set(statements("2026-11")) == {"beta"}
    assert october_tasks[0][:3] == ("alpha", "trainer", "alpha")
    assert Decimal(october_tasks[0][3]) == 480
    assert (
        sorted(
            StatementLineTask.objects.filter(line__statement__period="2026-10").values_list(
                "task__namespace", "task__external_id", "task__team__name", "gpu_seconds"
            )
        )
        == october_tasks
    )


@pytest.mark.django_db
@pytest.mark.slow
def test_it_moves_only_the_intervals_after_a_relabel_and_audits_it(
    client,
    jobs_prometheus,  # noqa: F811
) -> None:
    jobs_source(jobs_prometheus.url)
    ingest_command(RELABEL_START, RELABEL_AT)  # labelled team red
    red = Task.objects.get(namespace="gamma", external_id="etl")
    ingest_command(RELABEL_AT, RELABEL_END)  # relabelled team blue

    rows = Task.objects.filter(namespace="gamma", external_id="etl").order_by("first_seen")
    assert [(t.team.name, t.first_seen) for t in rows] == [
        ("red", RELABEL_START),
        ("blue", RELABEL_AT),
    ]
    assert rows[0].pk == red.pk
    assert usage_by("team", RELABEL_START, RELABEL_END) == {"red": "0.200000", "blue": "0.200000"}
    assert set(UsageInterval.objects.filter(task=red).values_list("interval_start", flat=True)) == {
        RELABEL_START + (RELABEL_AT - RELABEL_START) * n / 3 for n in range(3)
    }
    entry = AuditEntry.objects.get(object_type="metering.task", action="change")
    assert entry.object_id == str(rows[1].pk)
    assert entry.changes["team"] == ["red", "blue"]
    assert entry.changes["from_interval"] == iso(RELABEL_AT)
    assert entry.changes["namespace"] == "gamma"

    # Blue's lead sees the task from the relabel on, never red's intervals of it.
    blue = lead_of(client, "blue")
    assert [t["team"] for t in blue.get("/api/v1/tasks/").json()["results"]] == ["blue"]
    assert blue.get(f"/tasks/{rows[1].pk}/").status_code == 200
    assert blue.get(f"/tasks/{red.pk}/").status_code == 404

    ingest_command(RELABEL_START, RELABEL_END, "--batch", "12")  # the whole span again, one run
    assert usage_by("team", RELABEL_START, RELABEL_END) == {"red": "0.200000", "blue": "0.200000"}
    assert Task.objects.filter(namespace="gamma", external_id="etl").count() == 2
    assert AuditEntry.objects.filter(object_type="metering.task", action="change").count() == 1


@pytest.mark.django_db
@pytest.mark.slow
def test_it_gives_a_task_metered_before_namespaces_its_namespace(jobs_prometheus) -> None:  # noqa: F811
    source = jobs_source(jobs_prometheus.url)
    legacy = Task.objects.create(
        source=source,
        external_id="trainer",
        team=Team.objects.create(name="alpha"),
        kind="training_batch",
        first_seen=ALPHA_START,
    )
    ingest_command(ALPHA_START, NAMESPACES_END)
    legacy.refresh_from_db()
    assert legacy.namespace == "alpha"
    assert UsageInterval.objects.filter(task=legacy).count() == 2
    assert sorted(Task.objects.values_list("namespace", "team__name")) == [
        ("alpha", "alpha"),
        ("beta", "beta"),
    ]
