"""A month in which two sources meter one GPU at the same time (a Thanos and a cluster's own
Prometheus, both configured) would bill its capacity and its pods' usage twice: the close
refuses, naming the sources, and finance's reason for an incomplete month does not override
it; a closed month that becomes so is not corrected from it. Windows written before GPUs were
recorded, beside another source's, cannot show it: the month closes only with finance's
reason, and a closed one draws no correction."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.utils import timezone

from audit.models import AuditEntry
from billing.models import PeriodClose, StatementLine
from billing.selectors import period_bounds
from billing.services import PeriodCloseRefused, period_close
from metering import partitions
from metering.models import CapacityInterval, GpuSighting, IngestWindow, Source, UsageInterval
from metering.services import WindowError, windows_withdraw
from tests.factories import SourceFactory, gpu_sighting, windows_complete
from tests.helpers import command_output

pytestmark = pytest.mark.django_db
SEPTEMBER, OCTOBER = "2026-09", "2026-10"


def at(day: int, hour: int) -> dt.datetime:
    return dt.datetime(2026, 9, day, hour, tzinfo=dt.UTC)


@pytest.fixture
def thanos(boundary_pool):
    """A second source, every window of September and October done and complete."""
    source = SourceFactory(name="thanos")
    windows_complete(periods=(SEPTEMBER, OCTOBER), sources=[source])
    return source


def test_it_refuses_to_close_a_month_in_which_two_sources_meter_one_gpu(boundary_pool, thanos):
    default = boundary_pool.tasks["search-api"].source
    gpu_sighting(default, "GPU-a", (at(29, 16), at(30, 16)))
    gpu_sighting(default, "GPU-b", (at(29, 16), at(30, 16)), node="gpu-node-02")
    gpu_sighting(thanos, "GPU-a", (at(30, 2), at(30, 3)), (at(30, 5), at(30, 6)))
    gpu_sighting(thanos, "GPU-c", (at(29, 16), at(30, 16)))  # its own cluster's

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER, accept_incomplete="Prometheus lost a day")

    (reason,) = refused.value.reasons
    assert reason.startswith(
        "sources default and thanos both meter 1 GPU(s) (GPU-a on gpu-node-01) between"
        " 2026-09-30T02:00:00Z and 2026-09-30T06:00:00Z: 2.00 GPU-hours of capacity, and their"
        " pods' usage, count twice."
    )
    assert not PeriodClose.objects.exists()


def test_it_closes_when_the_two_sources_meter_one_gpu_at_different_times(boundary_pool, thanos):
    """A node moved from one cluster to another: each source metered it while it was theirs
    (the two spans touch, [start, end)); and an overlap in another month is that month's."""
    default = boundary_pool.tasks["search-api"].source
    gpu_sighting(default, "GPU-a", (at(29, 16), at(30, 4)))
    october = dt.datetime(2026, 10, 3, tzinfo=dt.UTC)
    gpu_sighting(thanos, "GPU-a", (at(30, 4), october + dt.timedelta(hours=1)))
    gpu_sighting(default, "GPU-b", (october, october + dt.timedelta(hours=2)))
    gpu_sighting(thanos, "GPU-b", (october, october + dt.timedelta(hours=2)))

    assert period_close(period=SEPTEMBER).created
    with pytest.raises(PeriodCloseRefused, match="sources default and thanos both meter 1 GPU"):
        period_close(period=OCTOBER)


def test_it_withholds_the_corrections_of_a_closed_month_two_sources_then_meter(
    boundary_pool, thanos
) -> None:
    default = boundary_pool.tasks["search-api"].source
    period_close(period=SEPTEMBER)
    # Late data for September, and the second source's back-fill of the same GPU in it.
    late = dt.datetime(2026, 9, 30, 2, tzinfo=dt.UTC)
    UsageInterval.objects.filter(
        task=boundary_pool.tasks["vit-pretrain"], interval_start=late
    ).update(alloc_gpu_seconds=F("alloc_gpu_seconds") / 2)
    IngestWindow.objects.filter(start=late).update(changed_after_first_write=timezone.now())
    gpu_sighting(default, "GPU-a", (at(29, 16), at(30, 16)))
    gpu_sighting(thanos, "GPU-a", (at(29, 16), at(30, 16)))

    outcome = period_close(period=OCTOBER)

    assert outcome.corrections_withheld == (SEPTEMBER,)
    assert outcome.corrected_periods == ()
    assert not StatementLine.objects.filter(is_correction=True).exists()


def test_it_refuses_a_month_whose_windows_beside_another_sources_cannot_show_it(
    boundary_pool, thanos
) -> None:
    """The default source's windows were written before GPUs were recorded: beside thanos',
    a double metering there could not be seen. Finance may close it without, as for any
    incomplete range, and the close keeps the reason."""
    default = boundary_pool.tasks["search-api"].source
    IngestWindow.objects.filter(source=default).update(gpus_sighted=False)

    with pytest.raises(PeriodCloseRefused) as refused:
        period_close(period=SEPTEMBER)

    (reason,) = refused.value.reasons
    assert reason.startswith(
        "720 window(s) of default between 2026-08-31T16:00Z to 2026-09-30T16:00Z were written"
        " before Tandem recorded the GPUs each window meters, and another source meters this"
        " month too"
    ), reason
    assert "manage.py ingest --source default --start 2026-08-31T16:00:00Z" in reason
    close = period_close(
        period=SEPTEMBER, accept_incomplete="Prometheus keeps 15 days"
    ).period_close
    assert close.incomplete_reason == "Prometheus keeps 15 days"
    assert [item["problem"] for item in close.incomplete_ranges] == ["GPUs unrecorded"]


def test_it_closes_a_month_one_source_meters_whatever_its_windows_recorded(boundary_pool) -> None:
    IngestWindow.objects.update(gpus_sighted=False)
    assert period_close(period=SEPTEMBER).created


def test_it_withholds_the_corrections_of_a_month_whose_windows_cannot_show_it(
    boundary_pool, thanos
) -> None:
    """A source back-filling a month another wrote before GPUs were recorded: the two may
    meter one GPU, so no correction is drawn from it until those windows are ingested again."""
    default = boundary_pool.tasks["search-api"].source
    period_close(period=SEPTEMBER)
    IngestWindow.objects.filter(source=default).update(gpus_sighted=False)
    late = dt.datetime(2026, 9, 30, 2, tzinfo=dt.UTC)
    UsageInterval.objects.filter(
        task=boundary_pool.tasks["vit-pretrain"], interval_start=late
    ).update(alloc_gpu_seconds=F("alloc_gpu_seconds") / 2)
    IngestWindow.objects.filter(start=late).update(changed_after_first_write=timezone.now())

    outcome = period_close(period=OCTOBER, accept_incomplete="October's windows predate it too")

    assert outcome.corrections_withheld == (SEPTEMBER,)
    assert not StatementLine.objects.filter(is_correction=True).exists()


def one_gpu(source, start: dt.datetime, *, intervals: int) -> None:
    """The source's capacity of one GPU over `intervals` five-minute intervals from `start`."""
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source,
            interval_start=start + n * dt.timedelta(minutes=5),
            gpus_present=1,
            capacity_gpu_seconds=300,
        )
        for n in range(intervals)
    )


def copy_of_default_in_september(boundary_pool, thanos) -> None:
    """thanos, a copy of the default source: the same GPU, the same capacity, over a day."""
    default = boundary_pool.tasks["search-api"].source
    gpu_sighting(default, "GPU-a", (at(29, 16), at(30, 16)))
    gpu_sighting(thanos, "GPU-a", (at(29, 16), at(30, 16)))
    one_gpu(thanos, at(29, 16), intervals=288)


def copy_withdrawn(thanos, start: str, end: str) -> str:
    """thanos disabled, its windows over [start, end) taken back: what the command says."""
    Source.objects.filter(pk=thanos.pk).update(enabled=False)
    arguments = ["--source", "thanos", "--start", start, "--end", end, "--reason", "a copy"]
    return command_output("withdraw_windows", *arguments)


def test_it_takes_a_copys_windows_back_and_the_month_closes(boundary_pool, thanos) -> None:
    copy_of_default_in_september(boundary_pool, thanos)
    with pytest.raises(PeriodCloseRefused, match="sources default and thanos both meter 1 GPU"):
        period_close(period=SEPTEMBER)
    bounds = period_bounds(SEPTEMBER)
    arguments = ["--source", "thanos", "--start", bounds.start.isoformat()]
    arguments += ["--end", bounds.end.isoformat(), "--reason", "a copy of default"]

    with pytest.raises(CommandError, match="source thanos is enabled: beat would ingest"):
        call_command("withdraw_windows", *arguments)
    Source.objects.filter(pk=thanos.pk).update(enabled=False)
    said = command_output("withdraw_windows", *arguments)

    assert said.startswith(
        "took back 720 windows of thanos from 2026-08-31T16:00:00Z to 2026-09-30T16:00:00Z"
        " and the 288 rows they wrote"
    ), said
    assert "closed months touched" not in said
    assert not IngestWindow.objects.filter(source=thanos, start__lt=bounds.end).exists()
    assert not GpuSighting.objects.filter(source=thanos).exists()
    assert not CapacityInterval.objects.filter(source=thanos).exists()
    entry = AuditEntry.objects.get(action="change", object_id=str(thanos.pk))
    assert entry.changes["withdrawn_windows"] == 720
    assert entry.changes["reason"] == "a copy of default"
    assert period_close(period=SEPTEMBER).created  # thanos is none of its sources any more
    assert IngestWindow.objects.filter(source=thanos).exists()  # October's are its own


def test_it_names_the_closed_months_it_takes_windows_back_from(boundary_pool, thanos) -> None:
    period_close(period=SEPTEMBER)
    said = copy_withdrawn(thanos, "2026-09-30T00:00:00Z", "2026-09-30T01:00:00Z")
    assert "closed months touched: 2026-09; their statements stand until a later close" in said
    assert "(close_period --period 2026-10 --recheck 2026-09)" in said


def test_it_takes_back_the_whole_windows_a_span_cuts(boundary_pool, thanos) -> None:
    """thanos' windows are an hour long: a span of five minutes inside one takes it all, so
    no row is left without its window, and a window the span does not reach keeps its own."""
    one_gpu(thanos, at(30, 0), intervals=24)
    said = copy_withdrawn(thanos, "2026-09-30T00:02:00Z", "2026-09-30T00:07:00Z")
    assert said.startswith(
        "took back 1 windows of thanos from 2026-09-30T00:00:00Z to 2026-09-30T01:00:00Z"
        " and the 12 rows"
    )
    assert not IngestWindow.objects.filter(source=thanos, start=at(30, 0)).exists()
    kept = CapacityInterval.objects.filter(source=thanos).values_list("interval_start", flat=True)
    assert min(kept) == at(30, 1)


def test_it_reads_whether_the_source_is_enabled_itself(boundary_pool, thanos) -> None:
    stale = Source.objects.get(pk=thanos.pk)
    stale.enabled = False  # as a caller read it, before an operator enabled it again
    with pytest.raises(WindowError, match="source thanos is enabled"):
        windows_withdraw(source=stale, start=at(30, 0), end=at(30, 1), operator="o", reason="r")
    assert IngestWindow.objects.filter(source=thanos, start=at(30, 0)).exists()


def test_it_draws_no_correction_from_an_archived_month(boundary_pool, thanos, tmp_path) -> None:
    """Rebuilt from the tables, an archived month holds nothing: asked to look again (as the
    withdrawal would have said before), a close would have refunded all of it."""
    partitions.month_partitions_ensure(partitions.month_of(SEPTEMBER))
    period_close(period=SEPTEMBER)
    call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())
    said = copy_withdrawn(thanos, "2026-09-30T00:00:00Z", "2026-09-30T01:00:00Z")
    assert "closed months touched whose metering is archived: 2026-09" in said
    assert "--recheck" not in said

    outcome = period_close(period=OCTOBER, recheck=[SEPTEMBER])

    assert outcome.corrected_periods == ()
    assert outcome.corrections_withheld == (SEPTEMBER,)
    assert not StatementLine.objects.filter(is_correction=True).exists()
