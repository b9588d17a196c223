"""Operators see sources, teams, tasks, services and ingest windows (status, error,
completeness) in the admin; secrets are never shown back."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from metering.models import IngestWindow, Service, Source, Task, Team


@pytest.mark.django_db
def test_it_lists_every_metering_object_in_the_admin(operator_client) -> None:
    source = Source.objects.create(name="prod", url="https://prom.example", bearer_token="s3cret")
    team = Team.objects.create(name="search")
    start = datetime.fromisoformat("2026-10-01T00:00:00Z")
    Task.objects.create(
        source=source, external_id="train-1", team=team, kind="training_batch", first_seen=start
    )
    Service.objects.create(source=source, external_id="search/llama", team=team)
    IngestWindow.objects.create(
        source=source,
        start=start,
        end=datetime.fromisoformat("2026-10-01T00:05:00Z"),
        status="pending",
        completeness=Decimal("0.950000"),
        error="Prometheus unreachable: connection refused",
    )
    for model in ("source", "team", "task", "service", "ingestwindow"):
        response = operator_client.get(f"/admin/metering/{model}/")
        assert response.status_code == 200, model
    windows = operator_client.get("/admin/metering/ingestwindow/").content.decode()
    assert "0.950000" in windows and "Prometheus unreachable" in windows
    form = operator_client.get(f"/admin/metering/source/{source.pk}/change/").content.decode()
    assert "s3cret" not in form


@pytest.mark.parametrize(
    ("parameter", "blind"),
    [
        ("latency_unseen", {"latency_unseen_pods": 2}),
        ("kueue_preemptions", {"kueue_preempted_workloads": 3}),
        ("kueue_preemptions", {"kueue_counts_unplaced": 1}),
        ("unmapped_kinds", {"unmapped_kind_gpu_seconds": Decimal(300)}),
        ("unheld_busy", {"unheld_busy_gpu_seconds": Decimal("0.5")}),
    ],
)
@pytest.mark.django_db
def test_it_filters_the_windows_of_each_blind_spot(operator_client, parameter, blind) -> None:
    source = Source.objects.create(name="prod", url="https://prom.example")
    for minute, values in ((0, {}), (5, blind)):
        IngestWindow.objects.create(
            source=source,
            start=datetime.fromisoformat(f"2026-10-01T00:{minute:02}:00Z"),
            end=datetime.fromisoformat(f"2026-10-01T00:{minute + 5:02}:00Z"),
            status="done",
            completeness=Decimal(1),
            **values,
        )
    for value, shown in (("yes", "00:05"), ("no", "00:00")):
        response = operator_client.get(f"/admin/metering/ingestwindow/?{parameter}={value}")
        assert response.status_code == 200
        assert [w.start.strftime("%H:%M") for w in response.context["cl"].result_list] == [shown]


@pytest.mark.django_db
def test_it_refuses_a_source_with_a_bad_mapping_in_the_admin(operator_client) -> None:
    response = operator_client.post(
        "/admin/metering/source/add/",
        {
            "name": "bad",
            "url": "http://prom.example",
            "scrape_interval_seconds": 15,
            "label_mapping": '{"task_label": "not a label"}',
            "priority_class_kinds": "{}",
            "max_concurrent_queries": 4,
            "verify_tls": "on",
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "label_mapping.task_label" in response.content.decode()
    assert not Source.objects.filter(name="bad").exists()
