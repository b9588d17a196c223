"""A task whose kind changes after its month was closed (kube-state-metrics' priority class
of a later month, or the admin's Task page) must not re-price that closed month.

A task row has one kind, the one its latest ingest saw (docs/telemetry.md, "Priority classes
the mapping does not name"). Late data for a closed month re-builds the whole month from the
task rows as they are now, so a kind that changed in the next month moves the closed month's
money between teams and lines, as correction lines nobody asked for.
"""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db.models import F

from audit.models import AuditEntry
from billing.models import PeriodClose, PeriodScenario, StatementLine
from billing.selectors import period_verification
from billing.services import period_close
from metering.models import Task
from tests.pools.boundary import usage_changed_late

pytestmark = pytest.mark.django_db
SEPTEMBER, OCTOBER = "2026-09", "2026-10"


def _late_chat_data_for_september(boundary_pool) -> None:
    """One re-ingested September hour: chat-api held 75 GPU-seconds less in each interval."""
    start = dt.datetime(2026, 9, 30, 2, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=1)
    usage_changed_late(
        boundary_pool, "chat-api", start, end, F("alloc_gpu_seconds") - 75, alloc_gpu_seconds__gt=75
    )


def _corrections(team: str) -> dict[str, Decimal]:
    return dict(
        StatementLine.objects.filter(
            is_correction=True, corrects_period=SEPTEMBER, statement__team__name=team
        ).values_list("kind", "amount")
    )


def test_it_keeps_a_closed_months_kinds_when_a_task_changes_kind_later(boundary_pool):
    period_close(period=SEPTEMBER)
    billed = dict(
        StatementLine.objects.filter(
            statement__period=SEPTEMBER, statement__team__name="nlp", is_correction=False
        ).values_list("kind", "amount")
    )
    # October: the notebook's pods run under inference-critical from now on; ingest writes
    # the task row's kind (metering.identity: kind follows kube-state-metrics).
    Task.objects.filter(pk=boundary_pool.tasks["nlp-notebook"].pk).update(kind="inference")
    _late_chat_data_for_september(boundary_pool)

    period_close(period=OCTOBER)

    # The late data changed chat-api's usage only: nlp's September is as it was billed
    # (on main: baseline +81.77, standard -35.23, offpeak -33.20, sla_penalty -57.19 CNY).
    assert _corrections("nlp") == {}, billed
    assert _corrections("chat") == {"baseline": Decimal("-2.23"), "standard": Decimal("-0.66")}
    notebook = str(boundary_pool.tasks["nlp-notebook"].pk)
    revision = PeriodScenario.objects.get(period=SEPTEMBER, revision=1)
    assert revision.task_kinds[notebook] == "training_interactive"
    assert period_verification(SEPTEMBER).ok


def test_it_says_a_kind_changed_after_the_close_is_no_change_of_the_closed_month(
    boundary_pool,
):
    period_close(period=SEPTEMBER)
    Task.objects.filter(pk=boundary_pool.tasks["nlp-notebook"].pk).update(kind="inference")

    assert period_close(period=SEPTEMBER).data_changed is False
    assert period_verification(SEPTEMBER).ok


def test_it_retakes_a_closed_months_kinds_when_finance_asks(boundary_pool) -> None:
    """The way back for a kind that was a guess at the close (a priority class the source did
    not map, mapped since): `close_period --retake-kinds`, audited on the close."""
    period_close(period=SEPTEMBER)
    notebook = boundary_pool.tasks["nlp-notebook"]
    Task.objects.filter(pk=notebook.pk).update(kind="inference")

    call_command(
        "close_period", "--period", OCTOBER, "--retake-kinds", SEPTEMBER, stdout=io.StringIO()
    )

    # The notebook's September re-priced as inference: nlp pays baseline for it, its SLA
    # penalty goes (an inference team's breaches move no penalty to it), training lines shrink.
    assert _corrections("nlp") == {
        "baseline": Decimal("81.47"),
        "standard": Decimal("-35.17"),
        "offpeak": Decimal("-33.20"),
        "sla_penalty": Decimal("-57.19"),
    }
    revisions = PeriodScenario.objects.filter(period=SEPTEMBER).order_by("revision")
    assert [r.task_kinds[str(notebook.pk)] for r in revisions] == [
        "training_interactive",
        "inference",
    ]
    october = PeriodClose.objects.get(period=OCTOBER)
    audited = AuditEntry.objects.get(action="close", object_id=str(october.pk))
    assert audited.changes["kinds_retaken"] == [SEPTEMBER]
    assert period_verification(SEPTEMBER).ok
