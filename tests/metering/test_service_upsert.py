"""Services seen in a run (identity._services_upsert): a new one is owned by the team most of
its namespace's pods name; a stored one keeps its team, and nothing is created for it."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from metering.identity import _services_upsert
from metering.measure import IntervalFacts, Measured, PodIdentity
from metering.models import Service, Team
from tests.factories import ServiceFactory, SourceFactory, TeamFactory

pytestmark = pytest.mark.django_db
HISTOGRAM = [("+Inf", 10)]


def _run(teams: dict[str, str], services: list[tuple[str, str]]) -> Measured:
    """One interval whose pods (one per namespace) name `teams`, serving `services`."""
    facts = IntervalFacts(
        latency={service: HISTOGRAM for service in services},
        identity={
            (namespace, f"{namespace}-pod"): PodIdentity(team_label=team, from_kube=True)
            for namespace, team in teams.items()
        },
    )
    return Measured(intervals={0: facts}, queries=[], evaluation_seconds=0.0, plan=None)


def test_it_gives_a_new_service_its_namespaces_team_and_a_stored_one_keeps_its_own() -> None:
    source = SourceFactory()
    stored = ServiceFactory(source=source, external_id="serving/llama", team=TeamFactory(name="a"))
    run = _run({"serving": "b", "search": "c"}, [("serving", "llama"), ("search", "bert")])

    pks = _services_upsert(source, run)

    new = Service.objects.get(source=source, external_id="search/bert")
    assert pks == {("serving", "llama"): stored.pk, ("search", "bert"): new.pk}
    assert new.team.name == "c"
    stored.refresh_from_db()
    assert stored.team.name == "a"
    # Team "b" would only have been the stored service's, which keeps "a": never created.
    assert not Team.objects.filter(name="b").exists()
    # Other tests' session pools leave audit entries of their own services: count this source's.
    audited = AuditEntry.objects.filter(
        object_type="metering.service", object_id__in=[str(stored.pk), str(new.pk)]
    )
    assert list(audited.values_list("object_id", "action")) == [(str(new.pk), "create")]
