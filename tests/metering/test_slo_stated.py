"""SLOs are stated by operators, not read from the telemetry: a service ingest finds (a new
model, or one an upgrade renamed, is a new `model_name`) gets the default SLO, which nobody
stated, and its SLA breaches (pricing rule 4, penalties moved to the inference team) would be
judged by it in silence. Each service says whether its SLO was stated (`Service.slo_stated`);
the month's close, the overview, the statements and the report name those that served requests
under the default."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest
from django.apps import apps
from django.core.management import call_command

from metering.identity import _services_upsert
from metering.models import LatencyInterval, Service
from metering.selectors import services_slo_unstated, window_blind_spots
from tests.factories import ServiceFactory, SourceFactory
from tests.metering.test_service_upsert import _run

pytestmark = pytest.mark.django_db
OCTOBER = (dt.datetime(2026, 10, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 1, tzinfo=dt.UTC))


def served(service: Service, at: dt.datetime, requests: int = 10) -> None:
    LatencyInterval.objects.create(
        service=service,
        interval_start=at,
        buckets=[["1", requests], ["+Inf", requests]],
        request_count=requests,
    )


def test_it_creates_a_service_ingest_finds_with_an_slo_nobody_stated() -> None:
    source = SourceFactory()
    _services_upsert(source, _run({"serving": "chat"}, [("serving", "llama-3.2")]))
    found = Service.objects.get(source=source, external_id="serving/llama-3.2")
    assert (found.slo_p99_ms, found.slo_stated) == (1000, None)


def test_it_marks_an_slo_stated_with_set_slo() -> None:
    service = ServiceFactory(external_id="chat/llm", slo_stated=None)
    call_command("set_slo", "--service", "chat/llm", "--p99-ms", "1000")  # even the default
    service.refresh_from_db()
    assert service.slo_p99_ms == 1000 and service.slo_stated is not None


def test_it_names_the_services_that_served_under_an_slo_nobody_stated() -> None:
    start, end = OCTOBER
    unstated = ServiceFactory(external_id="chat/llama-3.2", slo_stated=None, slo_p99_ms=1000)
    stated = ServiceFactory(external_id="chat/llama-3.1")
    idle = ServiceFactory(external_id="chat/idle", slo_stated=None)
    earlier = ServiceFactory(external_id="chat/september", slo_stated=None)
    served(unstated, start + dt.timedelta(hours=3))
    served(unstated, start + dt.timedelta(hours=4))
    served(stated, start + dt.timedelta(hours=3))
    served(idle, start + dt.timedelta(hours=3), requests=0)
    served(earlier, start - dt.timedelta(minutes=5))
    assert services_slo_unstated(start=start, end=end) == ["chat/llama-3.2"]
    assert window_blind_spots(start=start, end=end).slo_unstated_services == 1


@pytest.mark.parametrize(
    ("changed", "stated"), [({"slo_p99_ms": 2500}, True), ({"is_key": False}, False)]
)
def test_it_marks_an_slo_stated_where_an_operator_edits_it_in_the_admin(
    operator_client, changed: dict, stated: bool
) -> None:
    service = ServiceFactory(external_id="chat/llm", slo_stated=None, slo_p99_ms=1000)
    form = {
        "source": service.source_id,
        "external_id": service.external_id,
        "team": service.team_id,
        "slo_p99_ms": service.slo_p99_ms,
        "is_key": "on" if service.is_key else "",
    } | {
        key: ("on" if value is True else "" if value is False else value)
        for key, value in changed.items()
    }
    response = operator_client.post(f"/admin/metering/service/{service.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    service.refresh_from_db()
    assert (service.slo_stated is not None) == stated
    listed = operator_client.get("/admin/metering/service/?slo_stated=no")
    assert [s.external_id for s in listed.context["cl"].result_list] == (
        [] if stated else ["chat/llm"]
    )


def test_it_takes_an_slo_that_is_not_the_default_for_stated_where_it_migrates() -> None:
    migration = importlib.import_module("metering.migrations.0025_service_slo_stated")
    default = ServiceFactory(external_id="chat/default", slo_stated=None, slo_p99_ms=1000)
    other = ServiceFactory(external_id="chat/other", slo_stated=None, slo_p99_ms=2500)
    migration.slos_stated_before(apps, None)
    default.refresh_from_db()
    other.refresh_from_db()
    assert default.slo_stated is None and other.slo_stated is not None
