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
from django.contrib.auth.models import Permission, User
from django.core.management import call_command

from audit.models import AuditEntry
from metering.identity import _services_upsert
from metering.models import LatencyInterval, Service
from metering.selectors import services_slo_unstated, window_blind_spots
from tests.factories import ServiceFactory, SourceFactory
from tests.metering.test_service_upsert import _run

pytestmark = pytest.mark.django_db
OCTOBER = (dt.datetime(2026, 10, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 1, tzinfo=dt.UTC))


def served(service: Service, at: dt.datetime, requests: int = 200) -> None:
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


def test_it_marks_an_slo_stated_with_set_slo_and_audits_it() -> None:
    service = ServiceFactory(external_id="chat/llm", slo_stated=None, slo_p99_ms=700)
    call_command("set_slo", "--service", "chat/llm", "--p99-ms", "1000")  # even the default
    service.refresh_from_db()
    assert service.slo_p99_ms == 1000 and service.slo_stated is not None
    (entry,) = AuditEntry.objects.filter(
        object_type="metering.service", object_id=str(service.pk), action="change"
    )
    assert entry.changes["slo_p99_ms"] == [700, 1000]
    assert entry.changes["slo_stated"][0] is None


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
    found = services_slo_unstated(start=start, end=end, min_requests=100)
    assert found == ["chat/llama-3.2"]
    assert window_blind_spots(start=start, end=end, min_requests=100).slo_unstated_services == 1


def test_it_names_no_service_rule_4_never_judged() -> None:
    # Fewer requests an interval than the book's minimum: no SLO decided anything.
    start, end = OCTOBER
    quiet = ServiceFactory(external_id="chat/quiet", slo_stated=None)
    for hour in range(3):
        served(quiet, start + dt.timedelta(hours=hour), requests=5)
    assert services_slo_unstated(start=start, end=end, min_requests=100) == []
    assert services_slo_unstated(start=start, end=end, min_requests=5) == ["chat/quiet"]


def test_it_counts_two_sources_services_of_one_name_as_two() -> None:
    start, end = OCTOBER
    for name in ("east", "west"):
        service = ServiceFactory(
            source=SourceFactory(name=name), external_id="chat/llm", slo_stated=None
        )
        served(service, start)
    assert window_blind_spots(start=start, end=end, min_requests=100).slo_unstated_services == 2


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


@pytest.mark.parametrize("action", ["add", "state as it is"])
def test_it_states_an_slo_an_operator_gives_or_confirms_in_the_admin(
    operator_client, action: str
) -> None:
    template = ServiceFactory(external_id="chat/template")
    if action == "add":  # the form's initial 1000 ms, typed by an operator
        form = {
            "source": template.source_id,
            "external_id": "chat/new",
            "team": template.team_id,
            "slo_p99_ms": 1000,
            "is_key": "on",
        }
        response = operator_client.post("/admin/metering/service/add/", form)
        name = "chat/new"
    else:  # already right at the default: the action states it, audited
        ServiceFactory(external_id="chat/right", slo_stated=None, slo_p99_ms=1000)
        name = "chat/right"
        service = Service.objects.get(external_id=name)
        response = operator_client.post(
            "/admin/metering/service/",
            {"action": "slos_state", "_selected_action": [service.pk]},
        )
    assert response.status_code == 302, response.content.decode()[:2000]
    service = Service.objects.get(external_id=name)
    assert service.slo_stated is not None and service.slo_p99_ms == 1000
    assert AuditEntry.objects.filter(object_type="metering.service", object_id=str(service.pk))


def test_it_refuses_the_state_action_to_a_staff_user_who_may_only_view(client) -> None:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_service"))
    client.force_login(user)
    service = ServiceFactory(external_id="chat/right", slo_stated=None, slo_p99_ms=1000)
    client.post(
        "/admin/metering/service/", {"action": "slos_state", "_selected_action": [service.pk]}
    )
    service.refresh_from_db()
    assert service.slo_stated is None


def test_it_takes_an_slo_that_is_not_the_default_for_stated_where_it_migrates() -> None:
    migration = importlib.import_module("metering.migrations.0025_service_slo_stated")
    default = ServiceFactory(external_id="chat/default", slo_stated=None, slo_p99_ms=1000)
    other = ServiceFactory(external_id="chat/other", slo_stated=None, slo_p99_ms=2500)
    migration.slos_stated_before(apps, None)
    default.refresh_from_db()
    other.refresh_from_db()
    assert default.slo_stated is None and other.slo_stated is not None


def test_it_states_a_services_team_as_it_is_audited(operator_client) -> None:
    service = ServiceFactory(external_id="chat/right", team_stated=None)

    response = operator_client.post(
        "/admin/metering/service/", {"action": "teams_state", "_selected_action": [service.pk]}
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    service.refresh_from_db()
    assert service.team_stated is not None
    entry = AuditEntry.objects.get(object_type="metering.service", object_id=str(service.pk))
    assert entry.changes["team"] == [service.team.name, service.team.name]
