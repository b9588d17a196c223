"""The hourly rollup: kept equal to the intervals by triggers, and read only where exact."""

from __future__ import annotations

import datetime as dt
import importlib
import threading
import time
from decimal import Decimal

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing import selectors as billing_selectors
from dashboards import selectors as pages
from metering.models import (
    CapacityHour,
    CapacityInterval,
    IngestWindow,
    LatencyHourBucket,
    LatencyInterval,
    Service,
    Source,
    Task,
    Team,
    TeamHour,
    UsageHour,
    UsageInterval,
)
from metering.selectors import RangeSplit, hourly_rollup_serves, range_split, usage_parts
from reports import selectors as report_selectors
from tests.metering.rollup import rollup_drift, rollup_rows
from tests.pools.pages import build_page_pool

HOUR_10 = dt.datetime(2026, 10, 1, 10, 0, tzinfo=dt.UTC)
STEP = dt.timedelta(minutes=5)
MIGRATION = importlib.import_module("metering.migrations.0003_hourly_rollup")


def make_tasks() -> tuple[Source, list[Task], Service]:
    source = Source.objects.create(name="rollup", url="http://127.0.0.1:9090")
    team = Team.objects.create(name="rollup-team")
    tasks = [
        Task.objects.create(
            source=source, external_id=f"task-{n}", team=team, kind=kind, first_seen=HOUR_10
        )
        for n, kind in enumerate(["inference", "training_batch"])
    ]
    service = Service.objects.create(source=source, external_id="ns/model", team=team)
    return source, tasks, service


def usage(task: Task, start: dt.datetime, alloc: str = "300", peak: int = 10) -> UsageInterval:
    return UsageInterval(
        task=task,
        interval_start=start,
        alloc_gpu_seconds=Decimal(alloc),
        busy_gpu_seconds=Decimal(alloc) / 2,
        memory_avg_bytes=peak // 2,
        memory_peak_bytes=peak,
        read_operations=3,
        write_operations=4,
        read_bytes=5,
        write_bytes=6,
    )


@pytest.mark.django_db
def test_it_sums_a_tasks_intervals_per_utc_hour() -> None:
    _, (task, _), _ = make_tasks()
    UsageInterval.objects.bulk_create(
        [usage(task, HOUR_10 + i * STEP, alloc=str(100 + i), peak=i) for i in range(14)]
    )
    hours = list(UsageHour.objects.filter(task=task).order_by("hour_start").values())
    assert [(h["hour_start"], h["intervals"]) for h in hours] == [
        (HOUR_10, 12),
        (HOUR_10 + dt.timedelta(hours=1), 2),
    ]
    assert hours[0]["alloc_gpu_seconds"] == sum(Decimal(100 + i) for i in range(12))
    assert hours[0]["memory_peak_bytes"] == 11
    assert hours[1]["memory_peak_bytes"] == 13
    assert hours[0]["read_operations"] == 36


@pytest.mark.django_db
def test_it_recomputes_the_peak_when_the_interval_holding_it_is_deleted() -> None:
    _, (task, _), _ = make_tasks()
    UsageInterval.objects.bulk_create([usage(task, HOUR_10, peak=50), usage(task, HOUR_10 + STEP)])
    UsageInterval.objects.filter(memory_peak_bytes=50).delete()
    hour = UsageHour.objects.get(task=task)
    assert (hour.intervals, hour.memory_peak_bytes) == (1, 10)
    UsageInterval.objects.all().delete()
    assert not UsageHour.objects.exists()


@pytest.mark.django_db
def test_it_moves_an_interval_updated_into_another_hour() -> None:
    _, (task, _), _ = make_tasks()
    UsageInterval.objects.bulk_create([usage(task, HOUR_10)])
    later = HOUR_10 + dt.timedelta(hours=3)
    UsageInterval.objects.update(interval_start=later, alloc_gpu_seconds=7)
    assert list(UsageHour.objects.values_list("hour_start", "alloc_gpu_seconds")) == [
        (later, Decimal(7))
    ]
    assert rollup_drift() == []


@pytest.mark.django_db
def test_it_rolls_up_rows_written_by_copy_and_by_raw_sql_in_another_session_zone() -> None:
    source, (task, _), service = make_tasks()
    with connection.cursor() as cursor:
        # Ingest writes usage with COPY; a fix in psql may run in any session time zone.
        with cursor.cursor.copy(
            "COPY metering_usageinterval (task_id, interval_start, alloc_gpu_seconds,"
            " busy_gpu_seconds, memory_avg_bytes, memory_peak_bytes, read_operations,"
            " write_operations, read_bytes, write_bytes) FROM STDIN"
        ) as copy:
            copy.write(f"{task.pk}\t2026-10-01 10:55:00+00\t300\t0\t0\t0\t0\t0\t0\t0\n")
        cursor.execute("SET LOCAL TIME ZONE 'Asia/Kolkata'")  # +05:30
        cursor.execute(
            "INSERT INTO metering_capacityinterval (source_id, fault_domain, interval_start,"
            " gpus_present, capacity_gpu_seconds)"
            " VALUES (%s, 'node-1', '2026-10-01 11:00:00+00', 8, 2400),"
            " (%s, 'node-2', '2026-10-01 11:55:00+00', 8, 2400)",
            [source.pk, source.pk],
        )
        cursor.execute(
            "INSERT INTO metering_latencyinterval (service_id, interval_start, buckets,"
            " request_count) VALUES (%s, '2026-10-01 10:30:00+00', %s, 3)",
            [service.pk, '[["0.1", 1], ["+Inf", 3]]'],
        )
        cursor.execute("SET LOCAL TIME ZONE 'UTC'")
    assert UsageHour.objects.get().hour_start == HOUR_10
    assert list(CapacityHour.objects.values_list("hour_start", "capacity_gpu_seconds")) == [
        (HOUR_10 + dt.timedelta(hours=1), Decimal(4800))
    ]
    assert sorted(LatencyHourBucket.objects.values_list("le", "count", "intervals")) == [
        ("+Inf", Decimal(3), 1),
        ("0.1", Decimal(1), 1),
    ]
    assert rollup_drift() == []


@pytest.mark.django_db
def test_it_moves_a_tasks_hours_to_its_new_team_and_kind() -> None:
    _, (inference, training), _ = make_tasks()
    UsageInterval.objects.bulk_create(
        [usage(inference, HOUR_10), usage(training, HOUR_10), usage(training, HOUR_10 + 12 * STEP)]
    )
    other = Team.objects.create(name="other-team")
    # What ingest's upsert does when kube-state-metrics relabels the pod.
    Task.objects.filter(pk=training.pk).update(team=other, kind="training_interactive")
    assert sorted(TeamHour.objects.values_list("team__name", "kind", "hour_start")) == [
        ("other-team", "training_interactive", HOUR_10),
        ("other-team", "training_interactive", HOUR_10 + dt.timedelta(hours=1)),
        ("rollup-team", "inference", HOUR_10),
    ]
    assert rollup_drift() == []


@pytest.mark.django_db
def test_it_moves_only_the_relabelled_tasks_hours_when_an_upsert_touches_every_task() -> None:
    # Ingest's upsert updates every task of a batch (its last_seen widens) in one statement;
    # the trigger must pick out the few whose team or kind changed (migration 0012).
    source, (inference, training), _ = make_tasks()
    team = inference.team
    more = [
        Task.objects.create(
            source=source,
            external_id=f"more-{n}",
            team=team,
            kind="training_batch",
            first_seen=HOUR_10,
        )
        for n in range(30)
    ]
    UsageInterval.objects.bulk_create(
        [usage(task, HOUR_10) for task in [inference, training, *more]]
        + [usage(more[7], HOUR_10 + dt.timedelta(hours=2))]
    )
    other = Team.objects.create(name="other-team")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE metering_task SET last_seen = %s,"
            " team_id = CASE WHEN id = %s THEN %s ELSE team_id END WHERE source_id = %s",
            [HOUR_10 + dt.timedelta(hours=3), more[7].pk, other.pk, source.pk],
        )
    assert sorted(
        TeamHour.objects.values_list("team__name", "kind", "hour_start", "alloc_gpu_seconds")
    ) == [
        ("other-team", "training_batch", HOUR_10, Decimal(300)),
        ("other-team", "training_batch", HOUR_10 + dt.timedelta(hours=2), Decimal(300)),
        ("rollup-team", "inference", HOUR_10, Decimal(300)),
        ("rollup-team", "training_batch", HOUR_10, Decimal(300 * 30)),
    ]
    assert rollup_drift() == []


@pytest.mark.django_db
def test_it_adds_one_copy_of_several_teams_and_models_to_the_hours_already_there() -> None:
    # Ingest's path: one COPY a batch, onto hours earlier batches began. The trigger groups
    # the new rows once and sums the team level from those groups (migration 0013).
    source, (inference, training), _ = make_tasks()
    other = Team.objects.create(name="other-team")
    elsewhere = Task.objects.create(
        source=source, external_id="elsewhere", team=other, kind="inference", first_seen=HOUR_10
    )
    UsageInterval.objects.bulk_create([usage(inference, HOUR_10), usage(elsewhere, HOUR_10)])
    lines = [
        (task, HOUR_10 + n * STEP, model, alloc)
        for n in range(1, 14)  # into the next hour too
        for task, model, alloc in (
            (inference, "H100", "300"),
            (inference, "A100", "150.5"),
            (training, "H100", "99.999999"),
            (elsewhere, "A100", "0.000001"),
        )
    ]
    with connection.cursor() as cursor:
        with cursor.cursor.copy(
            "COPY metering_usageinterval (task_id, interval_start, gpu_model, alloc_gpu_seconds,"
            " busy_gpu_seconds, memory_avg_bytes, memory_peak_bytes, read_operations,"
            " write_operations, read_bytes, write_bytes) FROM STDIN"
        ) as copy:
            for task, start, model, alloc in lines:
                copy.write_row((task.pk, start, model, alloc, alloc, 1, 2, 3, 4, 5, 6))
    next_hour = HOUR_10 + dt.timedelta(hours=1)
    assert sorted(
        TeamHour.objects.values_list("team__name", "kind", "hour_start", "alloc_gpu_seconds")
    ) == [
        ("other-team", "inference", HOUR_10, Decimal("300.000011")),
        ("other-team", "inference", next_hour, Decimal("0.000002")),
        ("rollup-team", "inference", HOUR_10, Decimal(300) + 11 * Decimal("450.5")),
        ("rollup-team", "inference", next_hour, 2 * Decimal("450.5")),
        ("rollup-team", "training_batch", HOUR_10, 11 * Decimal("99.999999")),
        ("rollup-team", "training_batch", next_hour, 2 * Decimal("99.999999")),
    ]
    assert sorted(
        UsageHour.objects.filter(task=inference).values_list("hour_start", "gpu_model", "intervals")
    ) == [(HOUR_10, "", 1), (HOUR_10, "A100", 11), (HOUR_10, "H100", 11),
          (next_hour, "A100", 2), (next_hour, "H100", 2)]  # fmt: skip
    assert sorted(TeamHour.objects.values_list("busy_gpu_seconds", flat=True)) == sorted(
        [Decimal("150.000011"), Decimal("0.000002"), Decimal(150) + 11 * Decimal("450.5"),
         2 * Decimal("450.5"), 11 * Decimal("99.999999"), 2 * Decimal("99.999999")]
    )  # fmt: skip


@pytest.mark.django_db
def test_it_empties_the_rollup_when_the_intervals_are_truncated() -> None:
    _, (task, _), _ = make_tasks()
    UsageInterval.objects.bulk_create([usage(task, HOUR_10)])
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred checks left to run
        cursor.execute("TRUNCATE metering_usageinterval")
    assert not UsageHour.objects.exists()
    assert not TeamHour.objects.exists()


# Any sequence of inserts, updates and deletes (each one statement, as the ORM and ingest write
# them) leaves the rollup equal to a GROUP BY of what is left.
write = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 1), st.lists(st.integers(0, 35), max_size=12)),
    st.tuples(st.just("update"), st.integers(0, 1), st.integers(0, 35), st.integers(0, 35)),
    st.tuples(st.just("delete"), st.integers(0, 1), st.integers(0, 35), st.integers(0, 35)),
    st.tuples(
        st.just("relabel"), st.integers(0, 1), st.sampled_from(["inference", "training_batch"])
    ),
    st.tuples(st.just("capacity"), st.lists(st.integers(0, 35), max_size=6)),
    st.tuples(st.just("latency"), st.lists(st.integers(0, 35), max_size=6), st.booleans()),
)


@pytest.mark.django_db
@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(writes=st.lists(write, max_size=8))
def test_it_keeps_the_rollup_equal_to_the_intervals_whatever_is_written(writes) -> None:
    source = Source.objects.first() or make_tasks()[0]
    tasks = list(Task.objects.filter(source=source).order_by("pk"))
    service = Service.objects.get(source=source)
    for table in (UsageInterval, CapacityInterval, LatencyInterval):
        table.objects.all().delete()

    def at(n: int) -> dt.datetime:
        return HOUR_10 + n * STEP  # three hours of five-minute intervals

    for operation, *arguments in writes:
        if operation == "insert":
            task, starts = tasks[arguments[0]], sorted(set(arguments[1]))
            taken = set(task.usage.values_list("interval_start", flat=True))
            rows = [usage(task, at(n), alloc=str(n + 1), peak=n) for n in starts]
            UsageInterval.objects.bulk_create([r for r in rows if r.interval_start not in taken])
        elif operation == "update":
            task, first, last = tasks[arguments[0]], *sorted(arguments[1:])
            UsageInterval.objects.filter(
                task=task, interval_start__gte=at(first), interval_start__lte=at(last)
            ).update(alloc_gpu_seconds=Decimal("1.5"), memory_peak_bytes=first)
        elif operation == "delete":
            task, first, last = tasks[arguments[0]], *sorted(arguments[1:])
            UsageInterval.objects.filter(
                task=task, interval_start__gte=at(first), interval_start__lte=at(last)
            ).delete()
        elif operation == "relabel":
            Task.objects.filter(pk=tasks[arguments[0]].pk).update(kind=arguments[1])
        elif operation == "capacity":
            CapacityInterval.objects.filter(
                interval_start__in=[at(n) for n in arguments[0]]
            ).delete()
            CapacityInterval.objects.bulk_create(
                CapacityInterval(
                    source=source,
                    interval_start=at(n),
                    gpus_present=8,
                    capacity_gpu_seconds=Decimal(2400 - n),
                )
                for n in set(arguments[0])
            )
        else:  # latency, sometimes with a bound the other intervals lack
            starts, extra_bound = set(arguments[0]), arguments[1]
            LatencyInterval.objects.filter(interval_start__in=[at(n) for n in starts]).delete()
            buckets = [["0.5", 2], ["1", 3], ["+Inf", 4]] + ([["2.5", 4]] if extra_bound else [])
            LatencyInterval.objects.bulk_create(
                LatencyInterval(service=service, interval_start=at(n), buckets=buckets)
                for n in starts
            )
        assert rollup_drift() == [], (operation, arguments)


@pytest.mark.django_db
def test_it_fills_the_rollup_for_rows_written_before_it_existed() -> None:
    source, (task, _), service = make_tasks()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE wants no deferred checks
        for table in ("usageinterval", "capacityinterval", "latencyinterval"):
            cursor.execute(f"ALTER TABLE metering_{table} DISABLE TRIGGER USER")
        UsageInterval.objects.bulk_create([usage(task, HOUR_10 + i * STEP) for i in range(20)])
        CapacityInterval.objects.create(
            source=source, interval_start=HOUR_10, gpus_present=8, capacity_gpu_seconds=2400
        )
        LatencyInterval.objects.create(
            service=service, interval_start=HOUR_10, buckets=[["1", 1], ["+Inf", 2]]
        )
        for table in ("usageinterval", "capacityinterval", "latencyinterval"):
            cursor.execute(f"ALTER TABLE metering_{table} ENABLE TRIGGER USER")
        assert rollup_rows() == 0
        cursor.execute(MIGRATION.BACKFILL)
        cursor.execute(MIGRATION.BACKFILL_TEAMS)
    assert rollup_rows() == 2 + 2 + 1 + 2  # task hours, team hours, capacity, latency bounds
    assert rollup_drift() == []


@pytest.mark.django_db(transaction=True)
def test_it_rolls_up_two_transactions_writing_the_same_hour_at_once() -> None:
    """The second writer waits for the first to commit, then recomputes with its rows."""
    _, (task, _), _ = make_tasks()
    first_wrote, second_started = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    waited: list[float] = []

    def first() -> None:
        try:
            with transaction.atomic():
                UsageInterval.objects.bulk_create([usage(task, HOUR_10)])
                first_wrote.set()
                second_started.wait(10)
                time.sleep(0.5)  # the second writer is now inside its insert
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    def second() -> None:
        try:
            first_wrote.wait(10)
            with transaction.atomic():
                second_started.set()
                began = time.monotonic()
                UsageInterval.objects.bulk_create([usage(task, HOUR_10 + STEP)])
                waited.append(time.monotonic() - began)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert waited[0] >= 0.3  # it did wait for the lock
    hour = UsageHour.objects.get(task=task)
    assert (hour.intervals, hour.alloc_gpu_seconds) == (2, Decimal(600))
    assert rollup_drift() == []


# --- Where readers use it ---------------------------------------------------------------

SHANGHAI_MONTH = (
    dt.datetime(2026, 9, 30, 16, 0, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 16, 0, tzinfo=dt.UTC),
)


@pytest.mark.parametrize(
    ("zone", "start", "end", "serves"),
    [
        ("Asia/Shanghai", *SHANGHAI_MONTH, True),
        ("Europe/Berlin", dt.datetime(2026, 9, 30, 22, tzinfo=dt.UTC),
         dt.datetime(2026, 10, 31, 23, tzinfo=dt.UTC), True),  # across the end of DST
        ("Asia/Shanghai", SHANGHAI_MONTH[0], SHANGHAI_MONTH[1] - STEP, False),  # not on the hour
        ("Asia/Shanghai", SHANGHAI_MONTH[0] + STEP, SHANGHAI_MONTH[1], False),
        ("Asia/Kolkata", dt.datetime(2026, 9, 30, 18, 30, tzinfo=dt.UTC),
         dt.datetime(2026, 10, 31, 18, 30, tzinfo=dt.UTC), False),  # +05:30
        ("Australia/Lord_Howe", dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
         dt.datetime(2026, 12, 2, tzinfo=dt.UTC), True),  # summer time, +11:00
        ("Australia/Lord_Howe", dt.datetime(2026, 7, 1, tzinfo=dt.UTC),
         dt.datetime(2026, 7, 2, tzinfo=dt.UTC), False),  # standard time, +10:30
        ("Australia/Lord_Howe", dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
         dt.datetime(2026, 5, 1, tzinfo=dt.UTC), False),  # the change, in April
    ],
)  # fmt: skip
def test_it_reads_the_rollup_only_where_hours_add_up_to_the_range(
    settings, zone: str, start: dt.datetime, end: dt.datetime, serves: bool
) -> None:
    settings.TANDEM_READ_HOURLY_ROLLUP = True
    assert hourly_rollup_serves(start=start, end=end, zone=zone) is serves


def test_it_reads_the_intervals_when_the_rollup_is_switched_off(settings) -> None:
    settings.TANDEM_READ_HOURLY_ROLLUP = False
    assert not hourly_rollup_serves(start=SHANGHAI_MONTH[0], end=SHANGHAI_MONTH[1])


def every_read(start: dt.datetime, end: dt.datetime, teams: list[Team]) -> dict:
    some = Team.objects.filter(pk=teams[0].pk)
    quota_at = end - dt.timedelta(minutes=17)  # the current hour comes from the intervals
    return {
        "health": report_selectors.health_numbers(start=start, end=end),
        "health of a team": report_selectors.health_numbers(start=start, end=end, teams=some),
        "sharing": report_selectors.sharing_analytics(start=start, end=end),
        **{
            f"usage by {group}": report_selectors.usage_rows(start=start, end=end, group_by=group)
            for group in report_selectors.GROUP_BY_CHOICES
        },
        "usage of a team by day": report_selectors.usage_rows(
            start=start, end=end, group_by="day", teams=some
        ),
        "timeline by hour": pages.pool_timeline(start=start, end=end, bucket="hour"),
        "timeline by day, training": pages.pool_timeline(
            start=start, end=end, bucket="day", teams=some, kind="training_batch"
        ),
        "usage by day and kind": pages.usage_by_day_and_kind(start=start, end=end, teams=some),
        "top tasks": pages.top_tasks_by_usage(team=teams[0], start=start, end=end),
        **{
            f"trajectory of {task.external_id} by hour": pages.task_trajectory(
                task=task, step_seconds=300, bucket="hour"
            )
            for task in Task.objects.order_by("pk")
        },
        "quotas": billing_selectors.quota_statuses(teams=teams, at=quota_at),
    }


@pytest.mark.django_db
def test_it_gives_the_same_numbers_from_the_rollup_as_from_the_intervals(settings) -> None:
    pool = build_page_pool(first_day=dt.date(2026, 10, 1), days=2)
    teams = list(pool.teams.values())
    settings.TANDEM_READ_HOURLY_ROLLUP = True
    assert [part.hourly for part in usage_parts(start=pool.start, end=pool.end)] == [True]
    from_rollup = every_read(pool.start, pool.end, teams)
    settings.TANDEM_READ_HOURLY_ROLLUP = False
    assert [part.hourly for part in usage_parts(start=pool.start, end=pool.end)] == [False]
    from_intervals = every_read(pool.start, pool.end, teams)
    assert from_rollup["usage by team"], "the pool has usage"
    assert from_rollup["quotas"][0].used_gpu_hours > 0
    for name, expected in from_intervals.items():
        assert from_rollup[name] == expected, name


HOUR_11, HOUR_17 = HOUR_10 + dt.timedelta(hours=1), HOUR_10 + dt.timedelta(hours=7)
OFF_THE_HOUR = (HOUR_10 + STEP, HOUR_17 + 8 * STEP)  # 10:05 to 17:40 UTC


@pytest.mark.parametrize(
    ("zone", "start", "end", "split"),
    [
        ("Asia/Shanghai", *OFF_THE_HOUR,
         RangeSplit(hours=(HOUR_11, HOUR_17),
                    edges=((OFF_THE_HOUR[0], HOUR_11), (HOUR_17, OFF_THE_HOUR[1])))),
        ("Asia/Shanghai", HOUR_10, OFF_THE_HOUR[1],
         RangeSplit(hours=(HOUR_10, HOUR_17), edges=((HOUR_17, OFF_THE_HOUR[1]),))),
        ("Asia/Shanghai", *SHANGHAI_MONTH, RangeSplit(hours=SHANGHAI_MONTH, edges=())),
        ("Asia/Shanghai", HOUR_10 + STEP, HOUR_11 - STEP,  # no whole hour inside
         RangeSplit(hours=None, edges=((HOUR_10 + STEP, HOUR_11 - STEP),))),
        ("Asia/Kolkata", *OFF_THE_HOUR,  # +05:30: a local day is not made of UTC hours
         RangeSplit(hours=None, edges=(OFF_THE_HOUR,))),
    ],
)  # fmt: skip
def test_it_splits_a_range_into_rollup_hours_and_interval_edges(
    settings, zone: str, start: dt.datetime, end: dt.datetime, split: RangeSplit
) -> None:
    settings.TANDEM_READ_HOURLY_ROLLUP = True
    assert range_split(start=start, end=end, zone=zone) == split
    settings.TANDEM_READ_HOURLY_ROLLUP = False
    assert range_split(start=start, end=end, zone=zone) == RangeSplit(None, ((start, end),))


@pytest.mark.django_db
def test_it_reads_the_rollup_for_the_whole_hours_of_a_range_off_the_hour(settings) -> None:
    pool = build_page_pool(first_day=dt.date(2026, 10, 1), days=2)
    teams = list(pool.teams.values())
    start, end = OFF_THE_HOUR
    settings.TANDEM_READ_HOURLY_ROLLUP = True
    hours, edges = usage_parts(start=start, end=end)
    # The middle from the rollup, and only the edges' intervals: 11 + 8 of 91 five minutes.
    assert hours.hourly and not edges.hourly
    assert (
        hours.rows.count()
        == UsageHour.objects.filter(hour_start__gte=HOUR_11, hour_start__lt=HOUR_17).count()
    )
    in_range = UsageInterval.objects.filter(interval_start__gte=start, interval_start__lt=end)
    middle = in_range.filter(interval_start__gte=HOUR_11, interval_start__lt=HOUR_17)
    assert edges.rows.count() == in_range.count() - middle.count() > 0
    assert set(edges.rows.values_list("interval_start", flat=True)).isdisjoint(
        middle.values_list("interval_start", flat=True)
    )
    from_rollup = every_read(start, end, teams)
    settings.TANDEM_READ_HOURLY_ROLLUP = False
    assert [part.hourly for part in usage_parts(start=start, end=end)] == [False]
    from_intervals = every_read(start, end, teams)
    assert from_rollup["usage by team"], "the range has usage"
    for name, expected in from_intervals.items():
        assert from_rollup[name] == expected, name


@pytest.mark.django_db
def test_it_counts_the_ingested_part_of_the_current_hour_in_quota_use(settings) -> None:
    pool = build_page_pool(first_day=dt.date(2026, 10, 1), days=1)
    team = pool.teams["search"]
    at = pool.end - dt.timedelta(minutes=30)  # half an hour into the pool's last hour
    # Five-minute windows ingested into that hour so far: data up to 25 past the hour.
    IngestWindow.objects.create(
        source=pool.source,
        start=pool.end - dt.timedelta(hours=1),
        end=pool.end - dt.timedelta(minutes=35),
        status=IngestWindow.Status.DONE,
        completeness=1,
    )
    settings.TANDEM_READ_HOURLY_ROLLUP = True
    status = billing_selectors.quota_statuses(teams=[team], at=at)[0]
    expected = sum(
        UsageInterval.objects.filter(task__team=team, interval_start__lt=status.as_of).values_list(
            "alloc_gpu_seconds", flat=True
        ),
        Decimal(0),
    )
    assert status.as_of == pool.end - dt.timedelta(minutes=35)
    assert status.used_gpu_hours == (expected / 3600).quantize(Decimal("0.01"))
