"""Where an ingest's write phase goes: each part timed in one process, on a kept pool.

`make bench` reports the whole write phase against a raw COPY; this says what it is made of.
It ingests a TSDB kept by `benchmarks/ingest.py --keep` in this process, a task of 12 windows
at a time (`--task-windows 72` as beat's catch-up queues them), each measured in batches as the
worker does, with a timer around each part of the write (the task upsert, building the rows,
the usage DELETE + COPY, the other tables, the windows' update), and prints the seconds of
each, of the measure phase, and the write phase against a raw COPY of the same rows
(benchmarks/ingest.py's reference). Then what the usage table's rollup trigger and checks
add to a COPY of those rows (`usage_copy_parts`), and, for the tables whose rows each batch
updates in place (the GPU sightings, the tasks, the hourly rollup), how many updates stayed on
their page (HOT, no index touched) and the tables' and indexes' sizes after the ingest:
`--task-windows 1` writes the pool window by window, as a live source does. Not run by
`make bench` (it needs a kept pool, and the bench's figures are same-run ratios; these are a
breakdown).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/ingest.py --gpus 1000 --hours 6 --scrape 150 --keep
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/_write_phase.py var/bench/ingest-<pid> --gpus 1000 --hours 6

The scratch database's metering rows are TRUNCATEd first.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from benchmarks._kept import (  # noqa: E402
    PartTimers,
    kept_first,
    kept_parser,
    kept_prometheus,
    timed_parts,
)
from benchmarks.ingest import (  # noqa: E402
    BATCH,
    copy_rows_per_second,
    truncate_metering,
    usage_rows_text,
)
from metering import identity, ingest, partitions, services, writer  # noqa: E402
from metering.models import Source, UsageInterval  # noqa: E402

SECONDS = PartTimers()
# (module, function, what a reader calls it); ingest imports the first four by name.
PARTS = [
    (ingest, "_measure", "measure (Prometheus and Python)"),
    (ingest, "_tasks_upsert", "task upsert"),
    (identity, "_task_rows_upsert", "  its INSERT ... ON CONFLICT and the rows for it"),
    (ingest, "_services_upsert", "service upsert"),
    (ingest, "_run_write", "rest of the write (below)"),
    (writer, "_window_rows", "  building the rows"),
    (writer, "_usage_lines", "    usage lines"),
    (writer, "_latency_rows", "    latency rows"),
    (writer, "_preemption_rows", "    preemption rows"),
    (writer, "_content_hash", "  hashes"),
    (writer, "_usage_copy", "  usage COPY"),
    (writer, "_run_rows_delete", "  DELETEs"),
    (writer, "_rows_replace", "  every table replaced (COPY and DELETEs included)"),
    (writer, "_windows_result_update", "  windows' update"),
    (writer, "_sightings_replace", "  GPU sightings"),
]


def main() -> None:
    parser = kept_parser(__doc__.splitlines()[0], hours=6)
    parser.add_argument(
        "--task-windows", type=int, default=BATCH, help="windows per ingest call (a task's)"
    )
    options = parser.parse_args()
    first = kept_first(options)
    last = first + (options.hours * 3600 // options.scrape - 1) * options.scrape
    timed_parts(SECONDS, PARTS)
    truncate_metering()
    with kept_prometheus(options) as prometheus:
        source = Source.objects.create(
            name="write-phase", url=prometheus.url, scrape_interval_seconds=options.scrape
        )
        windows = services.windows_create(
            source=source,
            start=dt.datetime.fromtimestamp(first - options.scrape, dt.UTC),
            end=dt.datetime.fromtimestamp(last, dt.UTC),
        )
        ids = [window.pk for window in windows]
        updated_before = updated_in_place()
        began = time.perf_counter()
        per_task = options.task_windows
        for index in range(0, len(ids), per_task):
            ingest.windows_ingest(window_ids=ids[index : index + per_task])
        total = time.perf_counter() - began
        updated = updated_in_place()
        _, copy_rate = copy_rows_per_second(source)
        usage_copy = usage_copy_parts(source)
    rows = UsageInterval.objects.count()
    write = SECONDS["_tasks_upsert"] + SECONDS["_services_upsert"] + SECONDS["_run_write"]
    print(f"{len(ids)} windows, {rows:,} usage rows, {total:.2f} s in all")
    for _, name, label in PARTS:
        print(f"{label:<52} {SECONDS[name]:7.2f} s")
    print(f"{'write phase (task and service upserts, rest of the write)':<52} {write:7.2f} s")
    print(
        f"write phase rows/s: {rows / write:,.0f}; raw COPY of the same rows {copy_rate:,.0f}"
        f" rows/s; ratio {rows / write / copy_rate:.2f}"
    )
    print("the same usage rows COPYed again in one statement, into the empty usage table:")
    for label, seconds in usage_copy.items():
        print(f"  {label:<50} {seconds:7.2f} s")
    print(f"  {'into a plain table with the same indexes':<50} {rows / copy_rate:7.2f} s")
    print("the tables whose rows the ingest updated in place, after it (updates on the page: HOT):")
    for table, (updates, hot, table_size, index_size) in updated.items():
        updates_before, hot_before, *_ = updated_before.get(table, (0, 0, 0, 0))
        updates, hot = updates - updates_before, hot - hot_before
        if updates:
            print(
                f"  {table:<36} {updates:>9,} updates, {hot / updates:4.0%} on the page;"
                f" table {table_size / 2**20:6.1f} MiB, indexes {index_size / 2**20:6.1f} MiB"
            )


def updated_in_place() -> dict[str, tuple[int, int, int, int]]:
    """Per table whose rows every batch updates (the GPU sightings, the tasks, the hourly
    rollup's partitions): updates and HOT updates so far (PostgreSQL's counters), and the
    sizes of the table and of its indexes now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, too
        cursor.execute(
            "SELECT s.relname, s.n_tup_upd, s.n_tup_hot_upd, pg_table_size(s.relid),"
            " pg_indexes_size(s.relid) FROM pg_stat_user_tables s"
            " WHERE s.relname IN ('metering_gpusighting', 'metering_task') OR s.relid IN"
            " (SELECT inhrelid FROM pg_inherits WHERE inhparent = ANY(%s::regclass[]))"
            " ORDER BY s.relname",
            [list(partitions.ROLLUP_TABLES)],
        )
        return {name: tuple(figures) for name, *figures in cursor.fetchall()}


def usage_copy_parts(source: Source) -> dict[str, float]:
    """What the usage table's triggers (rollup, tasks' check) add to a COPY of the source's usage
    rows: COPYed into the emptied table in one statement, with its triggers and with its
    triggers off, and the deferred checks a commit would run; each in a transaction
    that is rolled back, so the rows stay as the ingest wrote them."""
    columns = ", ".join(writer.USAGE_COLUMNS)
    data = usage_rows_text(source)
    seconds: dict[str, float] = {}
    for label, rollup in (("with its triggers", True), ("without its triggers", False)):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("TRUNCATE metering_usageinterval")
            if not rollup:
                cursor.execute("ALTER TABLE metering_usageinterval DISABLE TRIGGER USER")
            began = time.perf_counter()
            with cursor.cursor.copy(f"COPY metering_usageinterval ({columns}) FROM STDIN") as copy:
                copy.write(data)
            seconds[label] = time.perf_counter() - began
            if rollup:
                began = time.perf_counter()
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                seconds["then the deferred checks of the commit"] = time.perf_counter() - began
            transaction.set_rollback(True)
    return seconds


if __name__ == "__main__":
    main()
