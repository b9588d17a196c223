"""Benchmark: close a month of a 1,000-GPU pool at a 300 s step (~4 million usage rows).

Loads ~4 million usage rows (500 tasks x 8,640 intervals at 93 %), 20 services' latency and
a few thousand preemptions straight into PostgreSQL with INSERT ... SELECT generate_series,
then times `close_period` against reading the same usage rows with COPY.

The pool mixes three GPU models on whole 8-GPU nodes (docs/pricing.md "GPU classes"), named
as dcgm-exporter's `modelName` writes them (docs/telemetry.md): 40 H100, 50 A100 and 35 L40S
nodes. Each task runs on one model (task id modulo 25: 8 in 25 on H100, 10 on A100, 7 on
L40S), so no class's usage exceeds its capacity, and the month is priced by a published book
with one class per model (effective from the month's first day, published once per database).

Run with DATABASE_URL pointing at a scratch, migrated database (its metering and billing rows
are TRUNCATEd first, ids restarted, so every run closes the same month), e.g.
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/billing_bench python benchmarks/pricing.py
Options: --tasks 500 (fewer for a quick run: rows scale with tasks). `main()` returns the rows
for `benchmarks/run.py`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("TANDEM_TIMEZONE", "Asia/Shanghai")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from benchmarks._table import Row, report, within  # noqa: E402
from kernel.price_book_fields import GPU_CLASS_FIELDS  # noqa: E402

GPUS = 1000
TASKS = 500
SERVICES = 20
STEP = 300
PERIOD = "2026-09"
START = "2026-08-31T16:00:00Z"  # 1 September 00:00 in Asia/Shanghai
INTERVALS = 30 * 24 * 3600 // STEP
# (class, dcgm-exporter modelName, GPUs, share of tasks in 25ths, D, F, W): 1,000 GPUs.
MODELS = (
    ("H100", "NVIDIA H100 80GB HBM3", 320, 8, "38.00", "4.10", "0.70"),
    ("A100", "NVIDIA A100-SXM4-80GB", 400, 10, "16.50", "2.90", "0.40"),
    ("L40S", "NVIDIA L40S", 280, 7, "7.20", "1.80", "0.35"),
)
# A class's fields in the kernel's order (kernel/price_book_fields.py): name, models, D, F, W.
GPU_CLASSES = [
    dict(zip(GPU_CLASS_FIELDS, (name, [model], depreciation, facility, power), strict=False))
    for name, model, _, _, depreciation, facility, power in MODELS
]


def price_book_ensure() -> None:
    """Publish, once per database, a book with the three classes in force for the month."""
    import datetime as dt

    from billing.selectors import price_book_in_force
    from billing.services import (
        price_book_create_draft,
        price_book_ensure_default,
        price_book_publish,
    )

    price_book_ensure_default()
    first_day = dt.date.fromisoformat(f"{PERIOD}-01")
    in_force = price_book_in_force(first_day)
    if [item.to_scenario_dict() for item in in_force.gpu_classes.all()] == sorted(
        GPU_CLASSES, key=lambda item: item["name"]
    ):
        return
    draft = price_book_create_draft(
        effective_from=first_day,
        gpu_classes=GPU_CLASSES,
        notes="Benchmark book: three GPU classes.",
    )
    price_book_publish(price_book_id=draft.pk)


def load(*, tasks: int = TASKS) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE billing_periodclose, billing_periodscenario, billing_statement,"
            " billing_statementline, billing_statementlinetask, billing_platformline,"
            " billing_slabreach, metering_usageinterval, metering_capacityinterval,"
            " metering_latencyinterval, metering_preemption, metering_ingestwindow,"
            " metering_podwait, metering_service, metering_task, metering_team,"
            # The month depends on the task ids (class, pattern): restarted, every run
            # loads the same rows and prints the same statements and scenario hash.
            " metering_source RESTART IDENTITY CASCADE"
        )
        cursor.execute(
            "INSERT INTO metering_source (name, url, bearer_token, basic_auth_user,"
            " basic_auth_password, verify_tls, scrape_interval_seconds, label_mapping,"
            " priority_class_kinds, max_concurrent_queries, shard_node_patterns, enabled,"
            " created) VALUES ('default', 'http://prometheus.invalid', '', '', '', true, 15,"
            " '{}', '{}', 4, '[]', true, now()) RETURNING id"
        )
        source = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO metering_team (name, created)"
            " SELECT 'team-' || n, now() FROM generate_series(0, 39) n"
        )
        cursor.execute(
            "INSERT INTO metering_task (source_id, external_id, team_id, kind, fault_domain,"
            " first_seen) SELECT %s, 'task-' || n,"
            " (SELECT id FROM metering_team WHERE name = 'team-' || (n %% 40)),"
            " (ARRAY['inference','training_batch','training_interactive','preprocessing'])"
            "[1 + n %% 4], '', now() FROM generate_series(0, %s) n",
            [source, tasks - 1],
        )
        cursor.execute(
            "INSERT INTO metering_service (source_id, external_id, team_id, slo_p99_ms, is_key)"
            " SELECT %s, 'service-' || n,"
            " (SELECT id FROM metering_team WHERE name = 'team-' || (n %% 40)), 500, true"
            " FROM generate_series(0, %s) n",
            [source, SERVICES - 1],
        )
        started = time.perf_counter()
        models = [model for _, model, *_ in MODELS]
        cursor.execute(
            "INSERT INTO metering_capacityinterval (source_id, fault_domain, interval_start,"
            " gpu_model, gpus_present, capacity_gpu_seconds)"
            " SELECT %s, '', %s::timestamptz + make_interval(secs => i * 300), m.model,"
            " m.gpus, m.gpus * 300 FROM generate_series(0, %s) i"
            " CROSS JOIN unnest(%s::text[], %s::int[]) AS m(model, gpus)",
            [source, START, INTERVALS - 1, models, [gpus for _, _, gpus, *_ in MODELS]],
        )
        assert sum(gpus for _, _, gpus, *_ in MODELS) == GPUS
        # The model of task id modulo 25 (its class's GPUs hold at least two per task there).
        bounds = []
        for _, _, _, share, *_ in MODELS:
            bounds.append((bounds[-1] if bounds else 0) + share)
        model_of_task = (
            "CASE"
            + "".join(
                f" WHEN t.id %% 25 < {bound} THEN '{model}'"
                for bound, model in zip(bounds, models, strict=True)
            )
            + " END"
        )
        # Each task runs in ~93 % of intervals on 1 or 2 GPUs of its model: ~4.0 million rows
        # for 500 tasks, at most 2 GPUs a task, within each class's capacity.
        cursor.execute(
            "INSERT INTO metering_usageinterval (task_id, interval_start, gpu_model,"
            " alloc_gpu_seconds, busy_gpu_seconds, memory_avg_bytes, memory_peak_bytes,"
            " read_operations, write_operations, read_bytes, write_bytes)"
            " SELECT t.id, %s::timestamptz + make_interval(secs => i * 300), "
            + model_of_task
            + ", 300 * (1 + (t.id + i) %% 2), 0, 0, 0, 0, 0, 0, 0"
            " FROM metering_task t CROSS JOIN generate_series(0, %s) i"
            " WHERE (t.id * 7 + i * 13) %% 100 < 93",
            [START, INTERVALS - 1],
        )
        cursor.execute(
            "INSERT INTO metering_latencyinterval (service_id, interval_start, buckets,"
            " request_count) SELECT s.id, %s::timestamptz + make_interval(secs => i * 300),"
            " CASE WHEN (s.id + i) %% 50 = 0"
            ' THEN \'[["0.1", 10], ["0.5", 50], ["1", 150], ["+Inf", 200]]\'::jsonb'
            ' ELSE \'[["0.1", 150], ["0.5", 199], ["1", 200], ["+Inf", 200]]\'::jsonb END,'
            " 200 FROM metering_service s CROSS JOIN generate_series(0, %s) i",
            [START, INTERVALS - 1],
        )
        cursor.execute(
            "INSERT INTO metering_preemption (task_id, pod, pods, at, gpus, seconds_since_start,"
            " lost_gpu_seconds) SELECT t.id, 'pod-' || k, 1,"
            " %s::timestamptz + make_interval(secs => (t.id * 977 + k * 86400) %% 2592000),"
            " 1, 3600, NULL FROM metering_task t CROSS JOIN generate_series(0, 4) k"
            " WHERE t.kind <> 'inference'",
            [START],
        )
        cursor.execute(
            'INSERT INTO metering_ingestwindow (source_id, start, "end", status, attempts,'
            " rows_written, queries, prometheus_seconds, samples_seen, samples_expected,"
            " completeness, warnings, error, content_hash, updated)"
            " SELECT %s, %s::timestamptz + make_interval(hours => h),"
            " %s::timestamptz + make_interval(hours => h + 1), 'done', 1, 0, '[]', 0, 0, 0,"
            " 1, '[]', '', '', now() FROM generate_series(0, 719) h",
            [source, START, START],
        )
        cursor.execute("SELECT count(*) FROM metering_usageinterval")
        rows = cursor.fetchone()[0]
    # Ingest stores each latency row's P99; rows loaded by SQL get theirs as an operator's
    # raw load would (metering.services.latency_p99_fill), so the close reads them stored.
    from metering.services import latency_p99_fill

    latency_p99_fill()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        print(f"loaded {rows:,} usage rows in {time.perf_counter() - started:.1f} s")
    return rows


def copy_seconds() -> float:
    """The reference: read the same usage rows with COPY, doing nothing with them."""
    started = time.perf_counter()
    with connection.cursor() as cursor:
        with cursor.cursor.copy(
            "COPY (SELECT interval_start, task_id, alloc_gpu_seconds FROM metering_usageinterval"
            f" WHERE interval_start >= '{START}') TO STDOUT"
        ) as copy:
            for _ in copy:
                pass
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=TASKS, help="500: ~4 M usage rows")
    options = parser.parse_args(argv)
    call_command("migrate", verbosity=0)
    # The month's own partition, as beat creates it ahead in production: the close then
    # reads one partition, not the default one (docs/architecture.md "Monthly partitions").
    from metering import partitions

    partitions.month_partitions_ensure(partitions.month_of(PERIOD))
    rows = load(tasks=options.tasks)
    price_book_ensure()
    reference = copy_seconds()
    started = time.perf_counter()
    call_command("close_period", "--period", PERIOD, "--no-corrections")
    close_seconds = time.perf_counter() - started
    ratio = close_seconds / reference
    print(f"COPY of the usage rows: {reference:.1f} s")
    print(f"close_period {PERIOD}: {close_seconds:.1f} s (goal <= 60 s)")
    print(f"ratio close / COPY: {ratio:.1f}x (goal <= 5x)")
    month = f"a month, {rows / 1e6:.1f} M usage rows, {len(MODELS)} GPU classes"
    return [
        Row(
            figure=f"month close ({month})",
            value=f"{close_seconds:.1f} s",
            reference=f"COPY read of the rows {reference:.1f} s",
            ratio=ratio,
            goal="ratio <= 5",
            ok=within(ratio, at_most=5),
        ),
        Row(
            figure=f"month close, absolute ({month})",
            value=f"{close_seconds:.1f} s",
            reference="",
            ratio=None,
            goal="<= 60 s",
            ok=within(close_seconds, at_most=60),
        ),
    ]


if __name__ == "__main__":
    report(main())
