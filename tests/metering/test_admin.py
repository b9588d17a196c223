"""Operators see sources, teams, tasks, services and ingest windows (status, error,
completeness) in the admin; secrets are never shown back."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from metering.models import IngestWindow, Service, Source, Task, Team


@pytest.fixture
def operator_client(client):
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "pw"))
    return client


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


@pytest.mark.django_db
def test_it_filters_the_windows_whose_inference_latency_was_not_measured(operator_client) -> None:
    source = Source.objects.create(name="prod", url="https://prom.example")
    for minute, pods in ((0, 0), (5, 2)):
        IngestWindow.objects.create(
            source=source,
            start=datetime.fromisoformat(f"2026-10-01T00:{minute:02}:00Z"),
            end=datetime.fromisoformat(f"2026-10-01T00:{minute + 5:02}:00Z"),
            status="done",
            completeness=Decimal(1),
            latency_unseen_pods=pods,
        )
    for value, shown in (("yes", "00:05"), ("no", "00:00")):
        response = operator_client.get(f"/admin/metering/ingestwindow/?latency_unseen={value}")
        assert response.status_code == 200
        assert [w.start.strftime("%H:%M") for w in response.context["cl"].result_list] == [shown]


@pytest.mark.django_db
def test_it_filters_the_windows_in_which_kueue_preempted_workloads(operator_client) -> None:
    source = Source.objects.create(name="prod", url="https://prom.example")
    for minute, workloads in ((0, 0), (5, 3)):
        IngestWindow.objects.create(
            source=source,
            start=datetime.fromisoformat(f"2026-10-01T00:{minute:02}:00Z"),
            end=datetime.fromisoformat(f"2026-10-01T00:{minute + 5:02}:00Z"),
            status="done",
            completeness=Decimal(1),
            kueue_preempted_workloads=workloads,
        )
    for value, shown in (("yes", "00:05"), ("no", "00:00")):
        response = operator_client.get(f"/admin/metering/ingestwindow/?kueue_preemptions={value}")
        assert response.status_code == 200
        assert [w.start.strftime("%H:%M") for w in response.context["cl"].result_list] == [shown]


@pytest.mark.django_db
def test_it_filters_the_windows_with_priority_classes_not_mapped(operator_client) -> None:
    source = Source.objects.create(name="prod", url="https://prom.example")
    for minute, seconds in ((0, 0), (5, 300)):
        IngestWindow.objects.create(
            source=source,
            start=datetime.fromisoformat(f"2026-10-01T00:{minute:02}:00Z"),
            end=datetime.fromisoformat(f"2026-10-01T00:{minute + 5:02}:00Z"),
            status="done",
            completeness=Decimal(1),
            unmapped_kind_gpu_seconds=Decimal(seconds),
        )
    for value, shown in (("yes", "00:05"), ("no", "00:00")):
        response = operator_client.get(f"/admin/metering/ingestwindow/?unmapped_kinds={value}")
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
