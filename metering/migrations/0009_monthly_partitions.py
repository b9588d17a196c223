"""The interval tables and their hourly rollup become monthly partitions (metering.partitions).

Each table is rebuilt as a table partitioned by range of its start, with a default partition
and one partition per month of the pool's zone from its oldest row to TANDEM_PARTITION_MONTHS_
AHEAD months after this one; its rows are copied over (no trigger fires: the rollup already
holds their sums), then the old table is dropped and everything it had is put back under the
same names, read from the catalog: check, unique and foreign key constraints, indexes, the
rollup triggers of 0003/0006 and the id sequence's position.

A partitioned table's primary key must hold the partition key: (id, interval_start) or
(id, hour_start). Every unique constraint already holds it, so the upserts of ingest and of
the rollup triggers keep their conflict targets. No foreign key points at these tables.

The reverse rebuilds plain tables the same way, with their primary key on id again.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations
from django.utils import timezone

from metering import partitions

KEPT_CONSTRAINTS = "('p', 'u', 'c', 'f', 'x')"


def _table_parts(cursor: Any, table: str) -> tuple[list, list, list]:
    """(constraints as (name, type, definition), index definitions, trigger definitions)
    of `table`; the indexes of its constraints come back with the constraints."""
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint"
        f" WHERE conrelid = %s::regclass AND contype IN {KEPT_CONSTRAINTS}"
        " ORDER BY contype <> 'p', conname",
        [table],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %s::regclass"
        " AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.indexrelid"
        " AND c.conrelid = i.indrelid) ORDER BY 1",
        [table],
    )
    # A partitioned table's index reads "ON ONLY": created so, it would not cover partitions.
    indexes = [definition.replace(" ON ONLY ", " ON ", 1) for (definition,) in cursor.fetchall()]
    cursor.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s::regclass"
        " AND NOT tgisinternal ORDER BY tgname",
        [table],
    )
    triggers = [definition for (definition,) in cursor.fetchall()]
    return constraints, indexes, triggers


def _months(cursor: Any) -> list[partitions.Month]:
    """The months from the oldest row of any partitioned table to the months ahead."""
    oldest = []
    for table, key in partitions.PARTITIONED.items():
        cursor.execute(f"SELECT min({key}) FROM {table}")
        oldest += [at for (at,) in cursor.fetchall() if at is not None]
    now = timezone.now()
    month = partitions.month_containing(min([*oldest, now]))
    last = partitions.month_containing(now)
    for _ in range(settings.TANDEM_PARTITION_MONTHS_AHEAD):
        last = partitions.month_after(last)
    months = [month]
    while month.name < last.name:
        month = partitions.month_after(month)
        months.append(month)
    return months


def _rebuild(cursor: Any, table: str, key: str, months: list[partitions.Month] | None) -> None:
    """`table` rebuilt partitioned by `key` into `months` (None: a plain table again)."""
    constraints, indexes, triggers = _table_parts(cursor, table)
    new = f"{table}__rebuilt"
    partitioned = months is not None
    cursor.execute(
        f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS INCLUDING IDENTITY)"
        + (f" PARTITION BY RANGE ({key})" if partitioned else "")
    )
    if partitioned:
        cursor.execute(
            f"CREATE TABLE {partitions.default_partition_name(table)} PARTITION OF {new} DEFAULT"
        )
        for month in months:
            cursor.execute(
                f"CREATE TABLE {partitions.partition_name(table, month)} PARTITION OF {new}"
                f" FOR VALUES FROM ({partitions._instant(month.start)})"
                f" TO ({partitions._instant(month.end)})"
            )
    cursor.execute(f"INSERT INTO {new} SELECT * FROM {table}")
    cursor.execute(
        "SELECT setval(pg_get_serial_sequence(%s, 'id'), last_value, is_called)"
        f" FROM {table}_id_seq",
        [new],
    )
    cursor.execute(f"DROP TABLE {table}")
    cursor.execute(f"ALTER TABLE {new} RENAME TO {table}")
    cursor.execute(f"ALTER SEQUENCE {new}_id_seq RENAME TO {table}_id_seq")
    for name, kind, definition in constraints:
        if kind == "p":
            definition = f"PRIMARY KEY (id, {key})" if partitioned else "PRIMARY KEY (id)"
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for definition in indexes + triggers:
        cursor.execute(definition)


def _sequence_names_check(cursor: Any) -> None:
    for table in partitions.PARTITIONED:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        (sequence,) = cursor.fetchone()
        if sequence.rsplit(".", 1)[-1] != f"{table}_id_seq":
            raise RuntimeError(f"{table}: id sequence {sequence} is not the one expected")


def partition(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        _sequence_names_check(cursor)
        months = _months(cursor)
        for table, key in partitions.PARTITIONED.items():
            _rebuild(cursor, table, key, months)


def unpartition(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table, key in partitions.PARTITIONED.items():
            _rebuild(cursor, table, key, None)


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0008_preemption_gpu_model"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition),
    ]
