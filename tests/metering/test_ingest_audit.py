"""Teams and services that ingestion creates are in the audit log, once each."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from metering.models import Source, Team
from metering.services import _teams_upsert


@pytest.mark.django_db
def test_it_records_each_team_ingestion_creates_once() -> None:
    source = Source.objects.create(name="kube", url="http://127.0.0.1:9090")
    Team.objects.create(name="existing")
    first = _teams_upsert({"existing", "search", "=cmd|' /C calc'!A0"}, source=source)
    again = _teams_upsert({"search", "vision"}, source=source)
    assert again["search"] == first["search"]
    created = AuditEntry.objects.filter(object_type="metering.team", action="create")
    assert sorted(created.values_list("object_repr", flat=True)) == [
        "=cmd|' /C calc'!A0",
        "search",
        "vision",
    ]
    entry = created.get(object_repr="search")
    assert entry.object_id == str(first["search"])
    assert entry.actor == "system"
    assert entry.changes["created_by"] == "ingest of source kube"
    assert entry.changes["name"] == "search"
