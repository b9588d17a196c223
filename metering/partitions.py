"""Monthly partitions of the interval tables and their hourly rollup, and month archives.

Usage, capacity and latency intervals, and the four hourly rollup tables, are PostgreSQL
declarative partitions by range of their start (`interval_start`, `hour_start`), one
partition per month of the pool's time zone (TANDEM_TIMEZONE): the months a close prices
(docs/pricing.md, "Inputs": a period is a calendar month in the pool's time zone). A close,
a month's report and the rollup of a month then read one partition; with UTC months a pool
in Asia/Shanghai would read the last eight hours of the previous UTC month's partition too.
Month boundaries of a zone with whole-hour offsets are whole UTC hours, so every rollup hour
falls in one partition.

Each table has a default partition, so no insert ever fails for want of a partition; beat
creates the partitions of this month and the next TANDEM_PARTITION_MONTHS_AHEAD months ahead
of time (`partitions_ensure`), moving any rows that had landed in the default partition.
Rows are moved inside the partitions, not through the parent table, so the rollup triggers
(migration 0003) see nothing: the rows are the same rows.

A closed month can be archived (`month_archive`): its partitions are written to files with
COPY, described by a manifest (columns, row counts, SHA-256), then detached and dropped.
`archive_loaded` puts an archive's intervals back for one transaction, rolled back at its end,
so a detached month can be re-priced from its archive (`verify_period --archive`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from kernel.period import next_period, period_of, period_utc_range

# Partitioned table -> its partition key.
PARTITIONED: dict[str, str] = {
    "metering_usageinterval": "interval_start",
    "metering_capacityinterval": "interval_start",
    "metering_latencyinterval": "interval_start",
    "metering_usagehour": "hour_start",
    "metering_teamhour": "hour_start",
    "metering_capacityhour": "hour_start",
    "metering_latencyhourbucket": "hour_start",
}
# What an archive puts back: the rollup tables are rebuilt from these by their triggers.
INTERVAL_TABLES = (
    "metering_usageinterval",
    "metering_capacityinterval",
    "metering_latencyinterval",
)
# The rollup tables (the rest) have rows updated in place: an hour's rows by every window of
# the hour that a live source writes (eleven times after the first), and again by a window
# written again. PostgreSQL packs a table's pages full by default, leaving no room for the new
# version of a row beside the old: each update then writes a new entry into every index and
# leaves the old ones to vacuum. Pages 30% free keep such updates on the page (HOT), with no
# index touched. A month's partition is created with it (`_partition_create`); migration
# 0031 set it on the partitions there were.
ROLLUP_TABLES = tuple(table for table in PARTITIONED if table not in INTERVAL_TABLES)
ROLLUP_FILLFACTOR = 70
MANIFEST = "manifest.json"
ARCHIVE_FORMAT = 1
COPY_BLOCK = 1 << 20


class ArchiveError(Exception):
    """An archive that cannot be written or read back; the message says why."""


@dataclass(frozen=True)
class Month:
    """A month of the pool's time zone: `start` and `end` are UTC instants."""

    name: str  # YYYY-MM
    start: dt.datetime
    end: dt.datetime


def month_of(name: str) -> Month:
    """The month `name` ("YYYY-MM") of the pool's zone (`kernel.period`); ValueError
    (PeriodError) naming the value when it is not one."""
    start, end = period_utc_range(name, settings.TANDEM_TIMEZONE)
    return Month(name=name, start=start, end=end)


def month_containing(at: dt.datetime) -> Month:
    return month_of(period_of(at, settings.TANDEM_TIMEZONE))


def month_after(month: Month) -> Month:
    return month_of(next_period(month.name))


def partition_name(table: str, month: Month) -> str:
    return f"{table}_p{month.name.replace('-', '_')}"


def default_partition_name(table: str) -> str:
    return f"{table}_default"


def _instant(moment: dt.datetime) -> str:
    """A SQL literal of an instant (DDL takes no parameters); ours, never user text."""
    return f"'{moment.astimezone(dt.UTC).isoformat()}'::timestamptz"


# --- Creating ahead ---------------------------------------------------------------------


def partitions_ensure(
    *, now: dt.datetime | None = None, months_ahead: int | None = None
) -> list[str]:
    """Create the partitions of the month of `now` and of the `months_ahead` months after it
    (TANDEM_PARTITION_MONTHS_AHEAD by default) that are missing; returns their names.
    Idempotent: beat runs it daily, the `partitions_create` command on demand."""
    if months_ahead is None:
        months_ahead = settings.TANDEM_PARTITION_MONTHS_AHEAD
    month = month_containing(now or timezone.now())
    created: list[str] = []
    for _ in range(months_ahead + 1):
        created += month_partitions_ensure(month)
        month = month_after(month)
    return created


def month_partitions_ensure(month: Month) -> list[str]:
    """Create `month`'s partition of every partitioned table that lacks one (one
    transaction); returns the names created."""
    created = []
    with transaction.atomic(), connection.cursor() as cursor:
        _constraints_checked_now(cursor)
        for table, key in PARTITIONED.items():
            name = partition_name(table, month)
            if not _table_exists(cursor, name):
                _partition_create(cursor, table, key, month)
                created.append(name)
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    return created


def _constraints_checked_now(cursor: Any) -> None:
    # ALTER TABLE refuses a table with pending deferred foreign key checks (rows the same
    # transaction wrote); checking them now is what the commit would have done. Django
    # declares every foreign key DEFERRABLE INITIALLY DEFERRED, restored after.
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def _partition_create(cursor: Any, table: str, key: str, month: Month) -> None:
    """A new partition, built apart and attached, so that the rows of its month already in
    the default partition move into it without passing through the parent's triggers."""
    name = partition_name(table, month)
    default = default_partition_name(table)
    start, end = _instant(month.start), _instant(month.end)
    # PostgreSQL takes no fillfactor on a partitioned table: each partition is given its own.
    storage = f" WITH (fillfactor = {ROLLUP_FILLFACTOR})" if table in ROLLUP_TABLES else ""
    cursor.execute(
        f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS){storage}"
    )
    cursor.execute(
        f"WITH moved AS (DELETE FROM {default} WHERE {key} >= {start} AND {key} < {end}"
        f" RETURNING *) INSERT INTO {name} SELECT * FROM moved"
    )
    cursor.execute(
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({start}) TO ({end})"
    )


def _table_exists(cursor: Any, name: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    return cursor.fetchone()[0]


def partitions_of(table: str) -> list[str]:
    """Names of `table`'s partitions, the default one included, sorted."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass ORDER BY 1",
            [table],
        )
        return [name for (name,) in cursor.fetchall()]


# --- Archiving --------------------------------------------------------------------------


def month_archive(*, month: Month, directory: Path) -> Path:
    """Write `month`'s partitions of every partitioned table to `directory`/YYYY-MM (COPY
    text, one file a table, and a manifest with columns, row counts and SHA-256), then
    detach and drop them: all in one transaction, the manifest written before the commit.
    Refuses when that folder already holds a manifest. The caller checks the month is
    closed (billing.services.period_archive)."""
    target = archive_folder_free(month=month, directory=directory)
    target.mkdir(parents=True, exist_ok=True)
    with transaction.atomic(), connection.cursor() as cursor:
        month_partitions_ensure(month)  # rows of the month still in the default partition
        names = {table: partition_name(table, month) for table in PARTITIONED}
        for name in names.values():
            # Writers of this month wait; the rest of the table stays open until the detach.
            cursor.execute(f"LOCK TABLE {name} IN SHARE MODE")
        tables = [_table_write(cursor, table, names[table], target) for table in PARTITIONED]
        manifest = _manifest(month, tables)
        _file_write(target / MANIFEST, json.dumps(manifest, indent=2).encode() + b"\n")
        try:
            _constraints_checked_now(cursor)
            for table, name in names.items():
                cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
                cursor.execute(f"DROP TABLE {name}")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        except Exception:
            (target / MANIFEST).unlink()  # nothing was dropped: no archive either
            raise
    return target / MANIFEST


def archive_folder_free(*, month: Month, directory: Path) -> Path:
    """`directory`/YYYY-MM, where `month` is archived; ArchiveError when an archive is there."""
    target = Path(directory) / month.name
    if (target / MANIFEST).exists():
        raise ArchiveError(f"{target / MANIFEST} exists: {month.name} is archived there already")
    return target


def _table_write(cursor: Any, table: str, partition: str, target: Path) -> dict:
    columns = _columns(cursor, table)
    path = target / f"{table}.copy"
    digest = hashlib.sha256()
    rows = 0
    # Ordered by id, so the same rows always make the same file (and checksum).
    query = f"COPY (SELECT {', '.join(columns)} FROM {partition} ORDER BY id) TO STDOUT"
    with open(path, "wb") as file, cursor.cursor.copy(query) as copy:
        for block in copy:
            data = bytes(block)
            digest.update(data)
            rows += data.count(b"\n")  # COPY text escapes newlines inside values
            file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return {
        "table": table,
        "file": path.name,
        "columns": columns,
        "rows": rows,
        "sha256": digest.hexdigest(),
    }


def _columns(cursor: Any, table: str) -> list[str]:
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum",
        [table],
    )
    return [name for (name,) in cursor.fetchall()]


def _manifest(month: Month, tables: list[dict]) -> dict:
    return {
        "format": ARCHIVE_FORMAT,
        "month": month.name,
        "time_zone": settings.TANDEM_TIMEZONE,
        "start": month.start.isoformat(),
        "end": month.end.isoformat(),
        "archived_at": timezone.now().isoformat(),
        "tables": tables,
    }


def _file_write(path: Path, data: bytes) -> None:
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    partial.rename(path)


def archive_manifest(directory: Path) -> dict:
    """The manifest of the archive in `directory` (a month's folder), every file checked
    against its row count and SHA-256; ArchiveError naming what does not match."""
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ArchiveError(f"{path}: no archive manifest there") from None
    except (OSError, ValueError) as error:
        raise ArchiveError(f"{path}: cannot read the manifest: {error}") from None
    if manifest.get("format") != ARCHIVE_FORMAT:
        raise ArchiveError(f"{path}: archive format {manifest.get('format')!r} is not known")
    for entry in manifest["tables"]:
        _file_check(Path(directory) / entry["file"], entry)
    return manifest


def _file_check(path: Path, entry: dict) -> None:
    digest, rows = hashlib.sha256(), 0
    try:
        with open(path, "rb") as file:
            while block := file.read(COPY_BLOCK):
                digest.update(block)
                rows += block.count(b"\n")
    except OSError as error:
        raise ArchiveError(f"{path}: {error}") from None
    if digest.hexdigest() != entry["sha256"] or rows != entry["rows"]:
        raise ArchiveError(
            f"{path}: {rows} rows, SHA-256 {digest.hexdigest()}; the manifest says"
            f" {entry['rows']} rows, {entry['sha256']}"
        )


@contextmanager
def archive_loaded(directory: Path) -> Iterator[Month]:
    """The archived month in `directory` back in the interval tables for the duration of
    the block, in a transaction rolled back at its end: nothing is left behind. The rollup
    triggers rebuild its hourly rows from them as ingest's COPY does. Refuses a month that
    still has interval rows (archived twice, or written to since)."""
    manifest = archive_manifest(directory)
    month = month_of(manifest["month"])
    if (month.start.isoformat(), month.end.isoformat()) != (manifest["start"], manifest["end"]):
        raise ArchiveError(
            f"{manifest['month']} was archived in {manifest['time_zone']}"
            f" ({manifest['start']} to {manifest['end']}); this pool's zone is"
            f" {settings.TANDEM_TIMEZONE}"
        )
    entries = {entry["table"]: entry for entry in manifest["tables"]}
    with transaction.atomic(), connection.cursor() as cursor:
        for table in INTERVAL_TABLES:
            _month_empty_check(cursor, table, month)
            _table_load(cursor, table, Path(directory) / entries[table]["file"], entries[table])
        yield month
        transaction.set_rollback(True)


def _month_empty_check(cursor: Any, table: str, month: Month) -> None:
    cursor.execute(
        f"SELECT EXISTS (SELECT FROM {table} WHERE interval_start >= %s AND interval_start < %s)",
        [month.start, month.end],
    )
    if cursor.fetchone()[0]:
        raise ArchiveError(f"{table} still holds rows of {month.name}; nothing was loaded")


def _table_load(cursor: Any, table: str, path: Path, entry: dict) -> None:
    columns = ", ".join(entry["columns"])
    with (
        open(path, "rb") as file,
        cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        while block := file.read(COPY_BLOCK):
            copy.write(block)
