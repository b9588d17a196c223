"""Monthly partitions of the interval tables (metering.partitions): created ahead by beat and
by a command, idempotent, with a default partition so no insert fails, and the migration that
converts the tables keeping their rows, constraints, indexes and rollup triggers."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction

from config.celery import app
from metering import partitions
from metering.models import Source, Task, Team, UsageHour, UsageInterval
from tests.helpers import migrate_to
from tests.metering.rollup import rollup_drift

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2031, 3, 10, 12, tzinfo=dt.UTC)  # months no other test writes to


@pytest.fixture(autouse=True)
def pool_timezone(settings) -> str:
    settings.TANDEM_TIMEZONE = "Asia/Shanghai"
    return settings.TANDEM_TIMEZONE


@pytest.fixture
def task() -> Task:
    source = Source.objects.create(name="partitions", url="http://127.0.0.1:9090")
    team = Team.objects.create(name="partitions-team")
    return Task.objects.create(
        source=source, external_id="trainer", team=team, kind="training_batch", first_seen=NOW
    )


def _usage(task: Task, start: dt.datetime, alloc: str = "300") -> UsageInterval:
    return UsageInterval.objects.create(
        task=task, interval_start=start, alloc_gpu_seconds=Decimal(alloc)
    )


def _partition_of(table: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_it_names_months_of_the_pools_zone() -> None:
    month = partitions.month_of("2031-05")

    assert month.start == dt.datetime(2031, 4, 30, 16, tzinfo=dt.UTC)  # midnight in Shanghai
    assert month.end == dt.datetime(2031, 5, 31, 16, tzinfo=dt.UTC)
    assert partitions.month_after(partitions.month_of("2031-12")).name == "2032-01"
    with pytest.raises(ValueError, match=r"must be YYYY-MM .* got '2031-13'"):
        partitions.month_of("2031-13")


def test_it_creates_partitions_ahead_and_an_insert_two_months_ahead_lands_in_its_own(task):
    created = partitions.partitions_ensure(now=NOW, months_ahead=3)

    months = ["2031_03", "2031_04", "2031_05", "2031_06"]
    assert created == [f"{table}_p{month}" for month in months for table in partitions.PARTITIONED]
    assert partitions.partitions_ensure(now=NOW, months_ahead=3) == []  # idempotent
    row = _usage(task, dt.datetime(2031, 5, 20, 8, tzinfo=dt.UTC))
    assert _partition_of("metering_usageinterval", row.pk) == "metering_usageinterval_p2031_05"
    hour = UsageHour.objects.get(task=task)
    assert _partition_of("metering_usagehour", hour.pk) == "metering_usagehour_p2031_05"


def _fillfactor(table: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT option_value FROM pg_class c, pg_options_to_table(c.reloptions)"
            " WHERE c.oid = %s::regclass AND option_name = 'fillfactor'",
            [table],
        )
        found = cursor.fetchone()
    return found[0] if found else None


def test_it_leaves_room_on_the_pages_of_the_tables_whose_rows_are_updated_in_place() -> None:
    partitions.partitions_ensure(now=NOW, months_ahead=0)

    assert _fillfactor("metering_gpusighting") == "50"  # every GPU, every window
    assert _fillfactor("metering_task") == "70"
    for table in partitions.ROLLUP_TABLES:
        assert _fillfactor(partitions.default_partition_name(table)) == "70"
        assert _fillfactor(partitions.partition_name(table, partitions.month_of("2031-03"))) == "70"
    # Interval rows are written once, never updated: their pages stay full.
    for table in partitions.INTERVAL_TABLES:
        assert _fillfactor(partitions.partition_name(table, partitions.month_of("2031-03"))) is None


def test_it_puts_a_row_of_a_month_without_partition_in_the_default_one_then_moves_it(task):
    early = _usage(task, dt.datetime(2031, 9, 1, 0, tzinfo=dt.UTC))  # September in Shanghai
    assert _partition_of("metering_usageinterval", early.pk) == "metering_usageinterval_default"

    partitions.month_partitions_ensure(partitions.month_of("2031-09"))

    assert _partition_of("metering_usageinterval", early.pk) == "metering_usageinterval_p2031_09"
    hour = UsageHour.objects.get(task=task)
    assert _partition_of("metering_usagehour", hour.pk) == "metering_usagehour_p2031_09"
    assert hour.alloc_gpu_seconds == Decimal(300)  # moved, not added again
    assert rollup_drift() == []


def test_it_keeps_the_unique_key_and_the_rollup_on_partitioned_tables(task):
    partitions.month_partitions_ensure(partitions.month_of("2031-03"))
    _usage(task, NOW)
    _usage(task, NOW + dt.timedelta(minutes=5), alloc="100")
    with pytest.raises(IntegrityError), transaction.atomic():
        _usage(task, NOW)
    UsageInterval.objects.filter(interval_start=NOW).update(alloc_gpu_seconds=Decimal(200))

    assert UsageHour.objects.get(task=task).alloc_gpu_seconds == Decimal(300)
    assert rollup_drift() == []


def test_it_creates_partitions_from_the_command() -> None:
    out = io.StringIO()
    call_command("partitions_create", "--month", "2032-02", stdout=out)

    assert "created metering_usageinterval_p2032_02" in out.getvalue()
    assert out.getvalue().strip().endswith(f"{len(partitions.PARTITIONED)} partition(s) created")
    with pytest.raises(CommandError, match="--month: period must be YYYY-MM"):
        call_command("partitions_create", "--month", "2032-2", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--months-ahead: give a number of months"):
        call_command("partitions_create", "--months-ahead", "-1", stdout=io.StringIO())


def test_it_has_beat_create_partitions_ahead_daily() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["metering-partitions-create-ahead"]

    assert entry["task"] == "metering.tasks.partitions_create_ahead"
    assert entry["schedule"] == dt.timedelta(days=1)
    assert "metering.tasks.partitions_create_ahead" in app.tasks
    assert settings.TANDEM_PARTITION_MONTHS_AHEAD == 3


def test_it_has_the_migration_leave_partitioned_tables_with_default_partitions() -> None:
    with connection.cursor() as cursor:
        for table, key in partitions.PARTITIONED.items():
            cursor.execute(
                "SELECT pg_get_partkeydef(%s::regclass),"
                " pg_get_constraintdef((SELECT oid FROM pg_constraint"
                "  WHERE conrelid = %s::regclass AND contype = 'p'))",
                [table, table],
            )
            assert cursor.fetchone() == (f"RANGE ({key})", f"PRIMARY KEY (id, {key})")
            assert partitions.default_partition_name(table) in partitions.partitions_of(table)


def _scans() -> dict[str, int]:
    """Scans of every partition by this transaction so far (sequential and index)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, seq_scan + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
            " WHERE relname LIKE 'metering\\_%\\_p%' OR relname LIKE 'metering\\_%\\_default'"
        )
        return dict(cursor.fetchall())


def test_it_has_the_rollup_touch_only_the_partitions_of_the_month_written(task):
    for name in ("2031-02", "2031-03", "2031-04"):
        partitions.month_partitions_ensure(partitions.month_of(name))
    for start in (NOW - dt.timedelta(days=30), NOW, NOW + dt.timedelta(days=30)):
        _usage(task, start)
    # What is checked is that the rollup's statements can be pruned to one partition. With
    # a handful of rows the planner may prefer to read tiny partitions whole instead (a test
    # database reused across runs has statistics saying they are empty); with a month of
    # rows it never does. Index scans only, so the plan is the one a real month gets.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    before = _scans()

    UsageInterval.objects.filter(task=task, interval_start=NOW).update(alloc_gpu_seconds=1)
    UsageInterval.objects.filter(task=task, interval_start=NOW).delete()

    after = _scans()
    touched = {name for name, scans in after.items() if scans > before.get(name, 0)}
    assert touched == {"metering_usageinterval_p2031_03", "metering_usagehour_p2031_03"} | {
        "metering_teamhour_p2031_03"
    }
    assert rollup_drift() == []


def _relkind(table: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [table])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_it_converts_plain_tables_keeping_rows_rollup_and_ids(settings) -> None:
    # Created first: the model's Source has columns of later migrations (shard patterns).
    source = Source.objects.create(name="plain", url="http://127.0.0.1:9")
    migrate_to([("metering", "0008_preemption_gpu_model")])
    try:
        assert _relkind("metering_usageinterval") == "r"
        task = Task.objects.create(
            source=source,
            external_id="trainer",
            team=Team.objects.create(name="plain-team"),
            kind="training_batch",
            first_seen=NOW,
        )
        old = _usage(task, dt.datetime(2026, 10, 1, 2, tzinfo=dt.UTC))
    finally:
        migrate_to()

    assert _relkind("metering_usageinterval") == "p"
    assert _partition_of("metering_usageinterval", old.pk) == "metering_usageinterval_p2026_10"
    assert UsageHour.objects.get(task=task).alloc_gpu_seconds == Decimal(300)
    new = _usage(task, dt.datetime(2026, 10, 1, 3, tzinfo=dt.UTC))
    assert new.pk > old.pk  # the id sequence went on where it was
    assert rollup_drift() == []
