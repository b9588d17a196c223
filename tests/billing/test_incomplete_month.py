"""A short month is refused, naming its missing and short ranges, unless finance accepts it."""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEntry
from billing import services
from billing.models import PeriodClose
from billing.services import BillingError, PeriodCloseRefused, period_close
from metering.models import IngestWindow, Service
from tests.helpers import command_output
from tests.pools.boundary import build_boundary_pool

pytestmark = pytest.mark.django_db
SEPTEMBER = "2026-09"
UTC = dt.UTC
REASON = "Prometheus lost its TSDB on 10-12 September; finance bills the rest (ticket FIN-88)"


def make_september_short(boundary_pool) -> None:
    """Three days and an hour never ingested, two hours ingested below the threshold."""
    IngestWindow.objects.filter(
        source=boundary_pool.source,
        start__gte=dt.datetime(2026, 9, 10, tzinfo=UTC),
        start__lt=dt.datetime(2026, 9, 13, tzinfo=UTC),
    ).delete()
    IngestWindow.objects.filter(start=dt.datetime(2026, 9, 20, 5, tzinfo=UTC)).delete()
    IngestWindow.objects.filter(
        start__in=[dt.datetime(2026, 9, 25, 2, tzinfo=UTC), dt.datetime(2026, 9, 25, 3, tzinfo=UTC)]
    ).update(completeness=Decimal("0.9"))


SHORT_SEPTEMBER = [
    "default has no ingest window from 2026-09-10T00:00Z to 2026-09-13T00:00Z (3 days)",
    "default has no ingest window from 2026-09-20T05:00Z to 2026-09-20T06:00Z (1 h)",
    "windows default 2026-09-25T02:00Z to 2026-09-25T04:00Z (2 windows) are below the"
    " 99.00% required (lowest 90.00%)",
]


def test_it_refuses_a_month_with_missing_windows_naming_the_ranges(boundary_pool):
    make_september_short(boundary_pool)

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    assert refused.value.reasons == SHORT_SEPTEMBER
    assert not PeriodClose.objects.exists()


def test_it_refuses_a_month_of_which_one_day_was_ingested(default_book):
    build_boundary_pool()  # 30 September and 1 October metered, nothing before

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    assert refused.value.reasons == [
        "default has no ingest window from 2026-08-31T16:00Z to 2026-09-29T16:00Z (29 days)"
    ]


def test_it_refuses_metering_rows_without_any_window(boundary_pool):
    IngestWindow.objects.all().delete()

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    assert refused.value.reasons == [
        "default has no ingest window from 2026-08-31T16:00Z to 2026-09-30T16:00Z (30 days)"
    ]


def test_it_names_the_ranges_in_the_commands_error_and_how_to_go_on(boundary_pool):
    make_september_short(boundary_pool)

    with pytest.raises(CommandError) as refused:
        call_command("close_period", "--period", SEPTEMBER)

    message = str(refused.value)
    assert message.startswith("period 2026-09 cannot be closed:\n")
    assert all(f"  - {reason}" in message for reason in SHORT_SEPTEMBER)
    assert 'close with --accept-incomplete "reason"' in message
    assert len(message.splitlines()) == 1 + len(SHORT_SEPTEMBER) + 1


def test_it_closes_with_accept_incomplete_recording_the_reason_and_the_ranges(boundary_pool):
    make_september_short(boundary_pool)

    output = command_output("close_period", "--period", SEPTEMBER, "--accept-incomplete", REASON)

    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert close.is_incomplete and close.incomplete_reason == REASON
    assert [item["message"] for item in close.incomplete_ranges] == SHORT_SEPTEMBER
    assert close.incomplete_ranges[0] == {
        "source": "default",
        "problem": "missing",
        "start": "2026-09-10T00:00:00+00:00",
        "end": "2026-09-13T00:00:00+00:00",
        "windows": 0,
        "message": SHORT_SEPTEMBER[0],
    }
    assert f"closed INCOMPLETE (3 ranges missing or short), accepted: {REASON}" in output
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes == {
        "pool_cost": str(close.pool_cost),
        "incomplete_reason": REASON,
        "incomplete_ranges": SHORT_SEPTEMBER,
    }


def test_it_records_no_flag_when_the_accepted_month_was_complete(boundary_pool):
    close = period_close(period=SEPTEMBER, accept_incomplete=REASON).period_close

    assert not close.is_incomplete and close.incomplete_ranges == []
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes == {"pool_cost": str(close.pool_cost)}


def test_it_accepts_only_metering_gaps_never_a_month_that_is_not_over(boundary_pool):
    make_september_short(boundary_pool)

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(
            period=SEPTEMBER,
            accept_incomplete=REASON,
            now=dt.datetime(2026, 9, 30, 12, tzinfo=UTC),
        )

    not_over = "the month is not over until 2026-09-30T16:00:00Z"
    assert refused.value.reasons == [not_over, *SHORT_SEPTEMBER]
    with pytest.raises(BillingError, match="accept_incomplete: give the reason"):
        period_close(period=SEPTEMBER, accept_incomplete="   ")
    assert not PeriodClose.objects.exists()


def test_it_never_accepts_incomplete_in_the_beat_close_and_logs_the_ranges(boundary_pool, caplog):
    make_september_short(boundary_pool)

    with caplog.at_level(logging.WARNING, logger="billing.services"):
        closed = services.period_close_due(now=dt.datetime(2026, 9, 30, 18, tzinfo=UTC))

    assert closed is None and not PeriodClose.objects.exists()
    (record,) = [r for r in caplog.records if r.name == "billing.services"]
    assert record.getMessage() == "not closing 2026-09 yet:\n" + "\n".join(
        f"  - {reason}" for reason in SHORT_SEPTEMBER
    )


def test_it_refuses_a_month_whose_windows_could_not_show_preemptions_until_accepted(
    boundary_pool,
):
    """kube-state-metrics before v2.19 writes no preemption reason (IngestWindow.
    preemptions_unreadable): the samples are all there, but rule 5's credits are unknown."""
    IngestWindow.objects.filter(
        source=boundary_pool.source,
        start__gte=dt.datetime(2026, 9, 15, tzinfo=UTC),
        start__lt=dt.datetime(2026, 9, 15, 2, tzinfo=UTC),
    ).update(preemptions_unreadable=True)
    unseen = (
        "windows default 2026-09-15T00:00Z to 2026-09-15T02:00Z (2 windows) show no"
        " preemptions: kube-state-metrics wrote no preemption reason (its releases before"
        " v2.19.0 write none), so starvation credits (rule 5) cannot be computed; upgrade it"
        " for the months ahead, and accept this one without them"
    )

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)
    assert refused.value.reasons == [unseen]
    assert not PeriodClose.objects.exists()

    output = command_output("close_period", "--period", SEPTEMBER, "--accept-incomplete", REASON)
    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert close.is_incomplete
    assert [(item["problem"], item["message"]) for item in close.incomplete_ranges] == [
        ("preemptions unseen", unseen)
    ]
    assert f"closed INCOMPLETE (1 without preemptions), accepted: {REASON}" in output


def test_it_names_a_window_both_short_and_without_preemptions_in_both_ranges(boundary_pool):
    unreadable = IngestWindow.objects.filter(
        source=boundary_pool.source,
        start__gte=dt.datetime(2026, 9, 15, tzinfo=UTC),
        start__lt=dt.datetime(2026, 9, 15, 3, tzinfo=UTC),
    )
    unreadable.update(preemptions_unreadable=True)
    unreadable.filter(start=dt.datetime(2026, 9, 15, 1, tzinfo=UTC)).update(
        completeness=Decimal("0.9")
    )

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    assert [reason.split(":")[0] for reason in refused.value.reasons] == [
        "windows default 2026-09-15T00",  # 00:00-03:00, one run of 3 windows
        "window default 2026-09-15T01",
    ]
    assert "(3 windows) show no preemptions" in refused.value.reasons[0]
    assert refused.value.reasons[1].startswith(
        "window default 2026-09-15T01:00Z to 2026-09-15T02:00Z is 90.00% complete"
    )


def test_it_closes_a_month_with_unmeasured_inference_latency_and_says_how_many_windows(
    boundary_pool,
):
    """Inference pods that served without the latency histogram (IngestWindow.
    latency_unseen_pods) leave rule 4 blind for them, but a pod meant to serve so would hold
    every close: the month closes complete, and the command says so."""
    IngestWindow.objects.filter(
        source=boundary_pool.source,
        start__gte=dt.datetime(2026, 9, 15, tzinfo=UTC),
        start__lt=dt.datetime(2026, 9, 15, 3, tzinfo=UTC),
    ).update(latency_unseen_pods=2)

    output = command_output("close_period", "--period", SEPTEMBER)
    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert not close.is_incomplete
    assert (
        "note: 3 windows have inference pods that served without the latency histogram: no SLA"
        " breach of theirs (pricing rule 4) is in this close; the windows' warnings name them"
    ) in output
    assert "note:" not in command_output("close_period", "--period", SEPTEMBER)  # nothing new
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes["latency_unseen_windows"] == 3


def test_it_logs_unmeasured_inference_latency_in_the_beat_close(boundary_pool, caplog):
    IngestWindow.objects.filter(
        source=boundary_pool.source, start=dt.datetime(2026, 9, 15, tzinfo=UTC)
    ).update(latency_unseen_pods=1)
    with caplog.at_level(logging.WARNING, logger="billing.services"):
        assert services.period_close_due(now=dt.datetime(2026, 9, 30, 18, tzinfo=UTC)) == SEPTEMBER
    assert (
        "2026-09 closed with 1 windows whose inference pods served without the latency"
        " histogram: no SLA breach of theirs (pricing rule 4) is in it"
    ) in caplog.text


def test_it_closes_a_month_with_guessed_identity_and_says_how_many_gpu_seconds(boundary_pool):
    """GPU-seconds of pods kube-state-metrics did not describe (IngestWindow.
    undescribed_gpu_seconds): their team is a guess, which the close says and audits."""
    IngestWindow.objects.filter(
        source=boundary_pool.source,
        start__gte=dt.datetime(2026, 9, 16, tzinfo=UTC),
        start__lt=dt.datetime(2026, 9, 16, 2, tzinfo=UTC),
    ).update(undescribed_gpu_seconds=Decimal("1200.5"))

    output = command_output("close_period", "--period", SEPTEMBER)

    assert not PeriodClose.objects.get(period=SEPTEMBER).is_incomplete
    assert (
        "note: 2 windows hold 2401.000000 GPU-seconds of pods kube-state-metrics did not"
        " describe: their task, team and kind are guesses"
    ) in output
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes["identity_guessed_windows"] == 2
    assert entry.changes["identity_guessed_gpu_seconds"] == "2401.000000"


def test_it_closes_a_month_in_which_kueue_preempted_and_says_how_many_workloads(
    boundary_pool, caplog
):
    """Workloads Kueue preempted (IngestWindow.kueue_preempted_workloads) show on no pod, so
    rule 5 pays no credit for them; a pool run by Kueue would hold every close, so the month
    closes complete, and the command, the log and the audit say how many."""
    for hour, workloads in ((1, 2), (5, 1)):
        IngestWindow.objects.filter(
            source=boundary_pool.source, start=dt.datetime(2026, 9, 17, hour, tzinfo=UTC)
        ).update(kueue_preempted_workloads=workloads)

    with caplog.at_level(logging.WARNING, logger="billing.services"):
        output = command_output("close_period", "--period", SEPTEMBER)

    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert not close.is_incomplete
    assert (close.kueue_preemption_windows, close.kueue_preempted_workloads) == (2, 3)
    assert (
        "note: Kueue preempted 3 workloads in 2 windows: no pod shows them preempted, so"
        " rule 5 (starvation credits) counted none of them in this close"
    ) in output
    assert "2026-09 closed with 3 workloads Kueue preempted in 2 windows" in caplog.text
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes["kueue_preemption_windows"] == 2
    assert entry.changes["kueue_preempted_workloads"] == 3


@pytest.mark.parametrize(
    ("column", "value", "closed", "note", "logged"),
    [
        # GPU-seconds under priority classes the source does not map: counted as training_batch.
        (
            "unmapped_kind_gpu_seconds",
            "600.25",
            ("kind_guessed_windows", "kind_guessed_gpu_seconds"),
            "note: 1 windows hold 600.250000 GPU-seconds under priority classes the source does"
            " not map: counted as training_batch",
            "2026-09 closed with 1 windows holding 600.250000 GPU-seconds",
        ),
        # GPUs no pod held were busy: work outside any pod's GPU request, billed to no task.
        (
            "unheld_busy_gpu_seconds",
            "150.5",
            ("unheld_busy_windows", "unheld_busy_gpu_seconds"),
            "note: in 1 windows GPUs no pod held were busy 150.500000 GPU-seconds: work outside"
            " any pod's GPU request, billed to no task",
            "2026-09 closed with 1 windows in which GPUs no pod held were busy 150.500000",
        ),
    ],
)
def test_it_closes_a_month_with_gpu_seconds_it_could_not_bill_right_and_says_how_many(
    boundary_pool, caplog, column, value, closed, note, logged
) -> None:
    """GPU-seconds a window stores as billed on a guess (IngestWindow.unmapped_kind_gpu_seconds)
    or billed to no task (unheld_busy_gpu_seconds): the close says, logs, audits and stores
    them, and is not refused."""
    IngestWindow.objects.filter(
        source=boundary_pool.source, start=dt.datetime(2026, 9, 19, 4, tzinfo=UTC)
    ).update(**{column: Decimal(value)})

    with caplog.at_level(logging.WARNING, logger="billing.services"):
        output = command_output("close_period", "--period", SEPTEMBER)

    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert not close.is_incomplete and close.has_blind_spots
    windows, seconds = closed
    assert (getattr(close, windows), getattr(close, seconds)) == (1, Decimal(value))
    assert note in output
    assert logged in caplog.text
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes[seconds] == str(Decimal(value).quantize(Decimal("0.000001")))


def test_it_closes_a_month_in_which_a_service_served_under_an_slo_nobody_stated(
    boundary_pool, caplog
) -> None:
    """chat-api's SLO is the default nobody stated (a service ingest found): its SLA breaches
    were judged by it. The close says, logs, audits and stores how many such services, and is
    not refused."""
    Service.objects.filter(external_id="chat-api").update(slo_stated=None)

    with caplog.at_level(logging.WARNING, logger="billing.services"):
        output = command_output("close_period", "--period", SEPTEMBER)

    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert not close.is_incomplete and close.has_blind_spots
    assert close.slo_unstated_services == 1
    assert (
        "note: 1 service(s) had their SLA breaches (rule 4) judged by the default SLO, which"
        " nobody stated"
    ) in output
    assert "2026-09 closed with 1 service(s) whose SLA breaches (rule 4) were judged by" in (
        caplog.text
    )
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes["slo_unstated_services"] == 1


def test_it_says_how_many_of_kueues_counts_could_not_be_placed(boundary_pool) -> None:
    """A count first read from a Kueue that Prometheus never scraped before (restarted at a
    new address, a Prometheus holding nothing older): its evictions are in no window's count,
    and the close says so rather than "0 workloads"."""
    IngestWindow.objects.filter(
        source=boundary_pool.source, start=dt.datetime(2026, 9, 18, 2, tzinfo=UTC)
    ).update(kueue_counts_unplaced=2)

    output = command_output("close_period", "--period", SEPTEMBER)

    close = PeriodClose.objects.get(period=SEPTEMBER)
    assert (close.kueue_preemption_windows, close.kueue_preempted_workloads) == (1, 0)
    assert close.kueue_counts_unplaced == 2 and close.has_blind_spots
    assert "note: 2 of Kueue's counts were first read from a target" in output
    assert "Kueue preempted 0" not in output
    (entry,) = AuditEntry.objects.filter(object_type="billing.periodclose", action="close")
    assert entry.changes["kueue_counts_unplaced"] == 2
