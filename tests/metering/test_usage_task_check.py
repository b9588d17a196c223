"""A usage row's task is checked per statement by triggers (migration 0017), not by a
foreign key: everything the foreign key refused is still refused, with the same error
(IntegrityError, SQLSTATE 23503), and under concurrency the same locks decide."""

from __future__ import annotations

import datetime as dt
import threading
import time
from decimal import Decimal

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError

from metering.models import Task, UsageInterval
from metering.writer import USAGE_COLUMNS, _usage_copy
from tests.factories import TaskFactory

START = dt.datetime(2031, 6, 1, tzinfo=dt.UTC)
MISSING = 987_654_321  # a task id no test creates


def _line(task_id: int, minutes: int = 0) -> str:
    moment = (START + dt.timedelta(minutes=minutes)).isoformat()
    return f"{task_id}\t{moment}\t300.000000\t0.000000\t0\t0\t0\t0\t0\t0\tH100\n"


def _copy(lines: list[str]) -> None:
    """The rows COPYed as ingest COPYs them."""
    with connection.cursor() as cursor:
        _usage_copy(cursor, lines)


@pytest.mark.django_db
def test_it_refuses_a_copy_naming_an_unknown_task_and_keeps_none_of_it() -> None:
    task = TaskFactory()
    lines = [_line(task.pk, minutes) for minutes in range(0, 60, 5)]

    with pytest.raises(IntegrityError, match=f"task_id {MISSING}, and no such task"):
        with transaction.atomic():
            _copy([*lines, _line(MISSING)])

    assert UsageInterval.objects.count() == 0
    _copy(lines)
    assert UsageInterval.objects.filter(task=task).count() == 12


@pytest.mark.django_db
def test_it_refuses_a_row_or_an_update_naming_an_unknown_task() -> None:
    task = TaskFactory()
    with pytest.raises(IntegrityError, match=f"task_id {MISSING}"), transaction.atomic():
        UsageInterval.objects.create(
            task_id=MISSING, interval_start=START, alloc_gpu_seconds=Decimal(1)
        )
    row = UsageInterval.objects.create(task=task, interval_start=START, alloc_gpu_seconds=1)

    with pytest.raises(IntegrityError, match=f"task_id {MISSING}"), transaction.atomic():
        UsageInterval.objects.filter(pk=row.pk).update(task_id=MISSING)

    assert UsageInterval.objects.get(pk=row.pk).task_id == task.pk


@pytest.mark.django_db
def test_it_keeps_a_task_that_has_usage_rows() -> None:
    used, unused = TaskFactory(), TaskFactory()
    UsageInterval.objects.create(task=used, interval_start=START, alloc_gpu_seconds=1)

    with pytest.raises(ProtectedError):
        used.delete()
    with pytest.raises(IntegrityError, match=f"task {used.pk} has usage rows"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM metering_task WHERE id IN (%s, %s)", [unused.pk, used.pk])
    with pytest.raises(IntegrityError, match="its id cannot change"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE metering_task SET id = %s WHERE id = %s", [MISSING, used.pk])
    with connection.cursor() as cursor:  # TRUNCATE refuses pending foreign-key checks
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    # CASCADE follows foreign keys, and usage rows have none: refused, not left orphaned.
    with pytest.raises(IntegrityError, match="metering_task truncated"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("TRUNCATE metering_task CASCADE")

    assert set(Task.objects.values_list("pk", flat=True)) >= {used.pk, unused.pk}
    unused.delete()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE metering_task SET id = id WHERE id = %s", [used.pk])
        cursor.execute("TRUNCATE metering_usageinterval, metering_task CASCADE")
    assert not Task.objects.exists()


def _other_connection() -> psycopg.Connection:
    """A connection of its own to the test database, as Django opens its own."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params)


def _waiting_on_lock(pid: int) -> None:
    """Until the backend `pid` waits for a row lock (bounded: 10 s)."""
    with _other_connection() as watcher:
        for _ in range(1000):
            row = watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
            ).fetchone()
            if row and row[0] == "Lock":
                return
            time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for a lock")


def _in_thread(work) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(work())
        except Exception as error:  # the test reads what happened
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.django_db(transaction=True)
def test_it_refuses_rows_for_a_task_another_transaction_deletes() -> None:
    # The usage hours' foreign key, checked at the commit, would refuse them too: this
    # trigger refuses them first, when the COPY ends.
    task = TaskFactory()
    with _other_connection() as deleter, _other_connection() as writer:
        deleter.execute("DELETE FROM metering_task WHERE id = %s", [task.pk])  # not committed
        (writer_pid,) = writer.execute("SELECT pg_backend_pid()").fetchone()

        def write() -> None:
            with writer.cursor().copy(
                f"COPY metering_usageinterval ({', '.join(USAGE_COLUMNS)}) FROM STDIN"
            ) as copy:
                copy.write(_line(task.pk))
            writer.commit()

        thread, outcome = _in_thread(write)
        _waiting_on_lock(writer_pid)  # the check waits for the deleter, as the key's did
        deleter.commit()
        thread.join(10)

    assert isinstance(outcome[0], psycopg.errors.ForeignKeyViolation), outcome
    assert not UsageInterval.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_delete_a_task_whose_rows_another_transaction_writes() -> None:
    task = TaskFactory()
    with _other_connection() as deleter, _other_connection() as writer:
        with writer.cursor().copy(
            f"COPY metering_usageinterval ({', '.join(USAGE_COLUMNS)}) FROM STDIN"
        ) as copy:
            copy.write(_line(task.pk))  # not committed: the task is locked FOR KEY SHARE
        (deleter_pid,) = deleter.execute("SELECT pg_backend_pid()").fetchone()

        def delete() -> None:
            deleter.execute("DELETE FROM metering_task WHERE id = %s", [task.pk])
            deleter.commit()

        thread, outcome = _in_thread(delete)
        _waiting_on_lock(deleter_pid)
        writer.commit()
        thread.join(10)

    assert isinstance(outcome[0], psycopg.errors.ForeignKeyViolation), outcome
    assert UsageInterval.objects.filter(task_id=task.pk).count() == 1
    with connection.cursor() as cursor:  # the flush after this test must not trip on them
        cursor.execute("DELETE FROM metering_usageinterval WHERE task_id = %s", [task.pk])
