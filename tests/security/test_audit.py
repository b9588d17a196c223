"""The audit log: changes to sources, teams, services, price books, quotas, tokens, roles and
period closes are recorded (who, when, what changed) through the admin and the services; the log
is append-only (model, queryset and a PostgreSQL trigger) and only platform admins see it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet
from django.test import Client
from django.urls import reverse

from access.models import ApiToken, Role
from access.services import api_token_create, api_token_revoke, role_assign
from audit.models import AuditEntry, AuditLogIsAppendOnly
from audit.services import audit_record
from billing.models import PriceBook
from billing.services import (
    period_close,
    price_book_create_draft,
    price_book_ensure_default,
    price_book_publish,
    quota_set,
)
from metering.models import Service, Source, Team
from metering.services import source_default_ensure
from tests import factories as f
from tests.factories import windows_complete
from tests.pools.boundary import build_boundary_pool


@pytest.fixture
def root(db, django_user_model):
    user = django_user_model.objects.create_superuser(username="root", password="x" * 20)
    Role.objects.create(user=user, name=Role.Name.PLATFORM)
    return user


@pytest.fixture
def admin_client(root) -> Client:
    client = Client()
    client.force_login(root)
    return client


@pytest.fixture(autouse=True)
def log_start(db) -> None:
    """The log is append-only, and other modules' committed fixtures (ingest creating teams
    and services) leave entries behind: each test reads only what was appended after it began."""
    global FIRST_NEW_ID
    FIRST_NEW_ID = (
        AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    ) + 1


FIRST_NEW_ID = 1


def log() -> QuerySet[AuditEntry]:
    return AuditEntry.objects.filter(pk__gte=FIRST_NEW_ID)


def entries(object_type: str, action: str | None = None) -> list[AuditEntry]:
    found = log().filter(object_type=object_type)
    if action:
        found = found.filter(action=action)
    return list(found.order_by("id"))


# --- Through the admin ------------------------------------------------------------------


def test_it_records_team_create_change_and_delete_in_the_admin(admin_client, root):
    response = admin_client.post(reverse("admin:metering_team_add"), {"name": "delta"})
    assert response.status_code == 302, response.content[:500]
    team = Team.objects.get(name="delta")
    admin_client.post(reverse("admin:metering_team_change", args=[team.pk]), {"name": "delta-2"})
    admin_client.post(reverse("admin:metering_team_delete", args=[team.pk]), {"post": "yes"})
    assert not Team.objects.filter(pk=team.pk).exists()

    created, changed, deleted = entries("metering.team")
    assert [e.action for e in (created, changed, deleted)] == ["create", "change", "delete"]
    assert {e.actor for e in (created, changed, deleted)} == {"root"}
    assert {e.actor_id for e in (created, changed, deleted)} == {root.pk}
    assert {e.object_id for e in (created, changed, deleted)} == {str(team.pk)}
    assert created.changes["name"] == "delta"
    assert changed.changes == {"name": ["delta", "delta-2"]}
    assert deleted.changes["name"] == "delta-2" and deleted.object_repr == "delta-2"


def test_it_records_a_source_change_without_its_secrets(admin_client):
    source = Source.objects.create(
        name="edge", url="http://127.0.0.1:9090", bearer_token="old-s3cret"
    )
    form = {
        "name": "edge",
        "url": "http://127.0.0.1:9091",
        "bearer_token": "new-s3cret",
        "basic_auth_user": "",
        "basic_auth_password": "",
        "verify_tls": "on",
        "scrape_interval_seconds": "15",
        "label_mapping": "{}",
        "priority_class_kinds": "{}",
        "max_concurrent_queries": "4",
        "enabled": "on",
    }
    response = admin_client.post(reverse("admin:metering_source_change", args=[source.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    (entry,) = entries("metering.source", "change")
    assert entry.changes["url"] == ["http://127.0.0.1:9090", "http://127.0.0.1:9091"]
    assert entry.changes["bearer_token"] == ["(changed)", "(changed)"]
    stored = log().values_list("changes", flat=True)
    assert not any("s3cret" in str(changes) for changes in stored)


def test_it_records_service_edits_from_the_changelist(admin_client):
    service = f.ServiceFactory(external_id="ns/chat", slo_p99_ms=500)
    response = admin_client.post(
        reverse("admin:metering_service_changelist"),
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": str(service.pk),
            "form-0-slo_p99_ms": "750",
            "form-0-is_key": "on",
            "_save": "Save",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    (entry,) = entries("metering.service", "change")
    assert entry.changes["slo_p99_ms"] == [500, 750]
    assert set(entry.changes) == {"slo_p99_ms", "slo_stated"}  # the SLO is stated now
    assert Service.objects.get(pk=service.pk).slo_p99_ms == 750


def test_it_records_quota_changes_in_the_admin_once(admin_client):
    team = f.TeamFactory(name="echo")
    quota = quota_set(team=team, allowance_gpu_hours=Decimal("10.00"))
    form = {
        "team": str(team.pk),
        "allowance_gpu_hours": "12.50",
        "allowance_money": "",
        "concurrent_gpu_cap": "",
        "io_caps": "{}",
    }
    response = admin_client.post(reverse("admin:billing_quota_change", args=[quota.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    created, changed = entries("billing.quota")
    assert created.action == "create" and created.actor == "system"
    assert changed.action == "change" and changed.actor == "root"
    assert changed.changes["allowance_gpu_hours"] == ["10.00", "12.50"]


def test_it_records_token_revocation_and_price_book_publishing_from_admin_actions(
    admin_client, root
):
    price_book_ensure_default()
    draft = price_book_create_draft(effective_from=dt.date(2027, 1, 1))
    token, _ = api_token_create(owner=root, name="scheduler", scopes=["quota:read"])
    admin_client.post(
        reverse("admin:access_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    admin_client.post(
        reverse("admin:billing_pricebook_changelist"),
        {"action": "publish", "_selected_action": [draft.pk]},
    )
    (revoked,) = entries("access.apitoken", "revoke")
    assert revoked.actor == "root" and revoked.object_id == str(token.pk)
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    (published,) = entries("billing.pricebook", "publish")
    assert published.actor == "root" and published.changes["status"] == ["draft", "published"]
    assert PriceBook.objects.get(pk=draft.pk).is_published


def test_it_records_a_team_leads_teams_changed_in_the_admin(admin_client, django_user_model):
    lead = django_user_model.objects.create_user(username="lena")
    alpha, bravo = f.TeamFactory(name="alpha"), f.TeamFactory(name="bravo")
    role = Role.objects.create(user=lead, name=Role.Name.TEAM_LEAD)
    role.teams.set([alpha])
    form = {"user": str(lead.pk), "name": "team_lead", "teams": [str(alpha.pk), str(bravo.pk)]}
    response = admin_client.post(reverse("admin:access_role_change", args=[role.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    (entry,) = entries("access.role", "change")
    assert entry.changes == {"teams": [[alpha.pk], sorted([alpha.pk, bravo.pk])]}
    assert entry.actor == "root"


# --- Through the services ---------------------------------------------------------------


def test_it_records_the_services_that_create_publish_assign_and_revoke(root, settings):
    price_book_ensure_default()
    draft = price_book_create_draft(effective_from=dt.date(2027, 1, 1), notes="2027 rates")
    price_book_publish(price_book_id=draft.pk)
    token, plain = api_token_create(owner=root, name="alertmanager", scopes=["read"])
    api_token_revoke(token=token)
    api_token_revoke(token=token)  # twice: nothing changes, nothing recorded
    team = f.TeamFactory(name="foxtrot")
    role_assign(user=root, name=Role.Name.TEAM_LEAD, teams=[team])
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    source_default_ensure()
    source_default_ensure()  # exists: not created again

    made = [(e.object_type, e.action) for e in log().order_by("id")]
    assert made == [
        ("billing.pricebook", "create"),
        ("billing.pricebook", "publish"),
        ("access.apitoken", "create"),
        ("access.apitoken", "revoke"),
        ("access.role", "change"),
        ("metering.source", "create"),
    ]
    created_token = entries("access.apitoken", "create")[0]
    assert created_token.changes["token_hash"] == "(secret)"
    assert plain not in str(created_token.changes)
    assert entries("access.role")[0].changes["teams"] == [team.pk]
    assert entries("billing.pricebook", "create")[0].changes["notes"] == "2027 rates"
    assert {e.actor for e in log()} == {"system"}


def test_it_records_a_period_close(settings, db):
    settings.TANDEM_TIMEZONE = "Asia/Shanghai"
    settings.TANDEM_STEP_SECONDS = 300
    price_book_ensure_default()
    build_boundary_pool()
    windows_complete(periods=["2026-09"])
    close = period_close(period="2026-09").period_close
    (entry,) = entries("billing.periodclose", "close")
    assert entry.object_id == str(close.pk)
    assert entry.changes == {"pool_cost": str(close.pool_cost)}
    period_close(period="2026-09")  # already closed: returned as it is, nothing recorded
    assert len(entries("billing.periodclose")) == 1


# --- Append-only ------------------------------------------------------------------------


def test_it_refuses_to_change_or_delete_an_entry_through_the_orm(root):
    entry = audit_record(action="create", obj=root)
    entry.actor = "mallory"
    with pytest.raises(AuditLogIsAppendOnly):
        entry.save()
    with pytest.raises(AuditLogIsAppendOnly):
        entry.delete()
    with pytest.raises(AuditLogIsAppendOnly):
        AuditEntry.objects.filter(pk=entry.pk).update(actor="mallory")
    with pytest.raises(AuditLogIsAppendOnly):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.get(pk=entry.pk).actor == "system"


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_auditentry SET actor = 'mallory'",
        "DELETE FROM audit_auditentry",
    ],
)
def test_it_refuses_to_change_or_delete_an_entry_in_sql(root, sql):
    entry = audit_record(action="create", obj=root)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql)
    assert AuditEntry.objects.get(pk=entry.pk).actor == "system"


def test_it_refuses_unknown_actions(root):
    with pytest.raises(ValueError, match="unknown audit action 'rename'"):
        audit_record(action="rename", obj=root)
    assert not log().exists()


# --- Who sees the log -------------------------------------------------------------------


def test_it_shows_the_log_read_only_to_platform_admins(admin_client, root):
    entry = audit_record(action="create", obj=f.TeamFactory(name="golf"), actor=root)
    listing = admin_client.get(reverse("admin:audit_auditentry_changelist"))
    assert listing.status_code == 200 and "golf" in listing.content.decode()
    detail = admin_client.get(reverse("admin:audit_auditentry_change", args=[entry.pk]))
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()  # nothing to save
    assert admin_client.get(reverse("admin:audit_auditentry_add")).status_code == 403
    deleted = admin_client.post(
        reverse("admin:audit_auditentry_delete", args=[entry.pk]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_it_hides_the_log_from_other_staff(db, django_user_model):
    clerk = django_user_model.objects.create_user(username="clerk", is_staff=True)
    Role.objects.create(user=clerk, name=Role.Name.FINANCE)
    client = Client()
    client.force_login(clerk)
    assert client.get(reverse("admin:audit_auditentry_changelist")).status_code == 403
