"""The hourly rollup of usage, capacity and latency, kept by triggers on the interval tables.

The triggers are per statement and see the rows the statement changed (transition tables):

- an INSERT adds the new rows' sums to the rollup rows of their (thing, UTC hour), creating
  them when missing (INSERT ... ON CONFLICT DO UPDATE; the peak takes the greater of the two).
  That is ingest's path (COPY after DELETE), so it reads nothing but the new rows;
- a DELETE or UPDATE recomputes the rollup rows of every (thing, hour) the old and new rows
  fall in from the interval table itself: sums cannot be subtracted from a peak (a maximum).

All of them take one transaction-scoped advisory lock first, so two transactions writing the
same hour take turns; as each statement of a PL/pgSQL function takes a new snapshot (READ
COMMITTED, Django's default), a recompute after the wait sees what the other committed. One
lock for every table, so no two writers can take them in opposite orders.

The team level (team x kind x hour) moves with the task level: inserted usage adds to it too,
a recompute of task hours recomputes those whole hours of it, and a task whose team or kind
changes (ingest's upsert follows kube-state-metrics) recomputes every hour it has usage in.

Hours are UTC (`date_trunc('hour', ..., 'UTC')`, whatever the session's time zone).
"""

import django.db.models.deletion
import metering.models
from django.db import migrations, models


LOCK = "PERFORM pg_advisory_xact_lock(7305135120493011);  -- 'tandem hourly rollup'"
HOUR = "date_trunc('hour', interval_start, 'UTC')"

# Per rollup: (interval table, rollup, key column, columns, their sums over `rows`, grouping,
# how a conflicting row takes the new sums).
USAGE = (
    "metering_usageinterval",
    "metering_usagehour",
    "task_id",
    "task_id, hour_start, intervals, alloc_gpu_seconds, busy_gpu_seconds,"
    " memory_avg_bytes_sum, memory_peak_bytes, read_operations, write_operations,"
    " read_bytes, write_bytes",
    f"task_id, {HOUR}, count(*), sum(alloc_gpu_seconds), sum(busy_gpu_seconds),"
    " sum(memory_avg_bytes), max(memory_peak_bytes), sum(read_operations),"
    " sum(write_operations), sum(read_bytes), sum(write_bytes)",
    "1, 2",
    "intervals = r.intervals + EXCLUDED.intervals,"
    " alloc_gpu_seconds = r.alloc_gpu_seconds + EXCLUDED.alloc_gpu_seconds,"
    " busy_gpu_seconds = r.busy_gpu_seconds + EXCLUDED.busy_gpu_seconds,"
    " memory_avg_bytes_sum = r.memory_avg_bytes_sum + EXCLUDED.memory_avg_bytes_sum,"
    " memory_peak_bytes = GREATEST(r.memory_peak_bytes, EXCLUDED.memory_peak_bytes),"
    " read_operations = r.read_operations + EXCLUDED.read_operations,"
    " write_operations = r.write_operations + EXCLUDED.write_operations,"
    " read_bytes = r.read_bytes + EXCLUDED.read_bytes,"
    " write_bytes = r.write_bytes + EXCLUDED.write_bytes",
    "task_id, hour_start",
)
CAPACITY = (
    "metering_capacityinterval",
    "metering_capacityhour",
    "source_id",
    "source_id, hour_start, capacity_gpu_seconds",
    f"source_id, {HOUR}, sum(capacity_gpu_seconds)",
    "1, 2",
    "capacity_gpu_seconds = r.capacity_gpu_seconds + EXCLUDED.capacity_gpu_seconds",
    "source_id, hour_start",
)
LATENCY = (
    "metering_latencyinterval",
    "metering_latencyhourbucket",
    "service_id",
    "service_id, hour_start, le, count, intervals",
    f"service_id, {HOUR}, b.bucket ->> 0, sum((b.bucket ->> 1)::numeric), count(*)",
    "1, 2, 3",
    "count = r.count + EXCLUDED.count, intervals = r.intervals + EXCLUDED.intervals",
    "service_id, hour_start, le",
)
# Latency rows hold their buckets as a JSON array: one row per bound.
BUCKETS = " CROSS JOIN LATERAL jsonb_array_elements(buckets) AS b(bucket)"
TEAM_ADD = f"""
    INSERT INTO metering_teamhour AS r (team_id, kind, hour_start, alloc_gpu_seconds,
        busy_gpu_seconds)
    SELECT t.team_id, t.kind, date_trunc('hour', n.interval_start, 'UTC'),
        sum(n.alloc_gpu_seconds), sum(n.busy_gpu_seconds)
    FROM new_rows n JOIN metering_task t ON t.id = n.task_id GROUP BY 1, 2, 3
    ON CONFLICT (team_id, kind, hour_start) DO UPDATE SET
        alloc_gpu_seconds = r.alloc_gpu_seconds + EXCLUDED.alloc_gpu_seconds,
        busy_gpu_seconds = r.busy_gpu_seconds + EXCLUDED.busy_gpu_seconds;"""


def _functions(table, rollup, key, columns, sums, group, add, conflict) -> str:
    buckets = BUCKETS if rollup == LATENCY[1] else ""
    in_hour = (
        f"JOIN {table} ON {table}.{key} = k.{key} AND {table}.interval_start >= k.hour_start"
        f" AND {table}.interval_start < k.hour_start + interval '1 hour'{buckets}"
    )
    teams = rollup == USAGE[1]
    # Recomputing, the key column is in both `k` and the table (name the table's), and the
    # hour is `k`'s.
    keys = f"SELECT DISTINCT {key}, {HOUR} AS hour_start FROM"
    return f"""
CREATE FUNCTION {rollup}_recompute(ids bigint[], hours timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ids IS NULL THEN RETURN; END IF;
    {LOCK}
    DELETE FROM {rollup} r USING unnest(ids, hours) AS k({key}, hour_start)
    WHERE r.{key} = k.{key} AND r.hour_start = k.hour_start;
    INSERT INTO {rollup} ({columns})
    SELECT {sums.replace(key, f"{table}.{key}", 1).replace(HOUR, "k.hour_start")}
    FROM unnest(ids, hours) AS k({key}, hour_start) {in_hour}
    GROUP BY {group};
    {"PERFORM metering_teamhour_recompute(ARRAY(SELECT DISTINCT unnest(hours)));" if teams else ""}
END $$;

CREATE FUNCTION {rollup}_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {LOCK}
    INSERT INTO {rollup} AS r ({columns})
    SELECT {sums} FROM new_rows{buckets} GROUP BY {group}
    ON CONFLICT ({conflict}) DO UPDATE SET {add};{TEAM_ADD if teams else ""}
    RETURN NULL;
END $$;
CREATE TRIGGER {rollup}_after_insert AFTER INSERT ON {table}
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {rollup}_after_insert();

CREATE FUNCTION {rollup}_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; hours timestamptz[];
BEGIN
    SELECT array_agg({key}), array_agg(hour_start) INTO ids, hours FROM ({keys} old_rows) AS k;
    PERFORM {rollup}_recompute(ids, hours);
    RETURN NULL;
END $$;
CREATE TRIGGER {rollup}_after_delete AFTER DELETE ON {table}
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {rollup}_after_delete();

CREATE FUNCTION {rollup}_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; hours timestamptz[];
BEGIN
    SELECT array_agg({key}), array_agg(hour_start) INTO ids, hours
    FROM ({keys} old_rows UNION {keys} new_rows) AS k;
    PERFORM {rollup}_recompute(ids, hours);
    RETURN NULL;
END $$;
CREATE TRIGGER {rollup}_after_update AFTER UPDATE ON {table}
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION {rollup}_after_update();

-- TRUNCATE has no transition table; it empties the interval table, so the rollup too.
CREATE FUNCTION {rollup}_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {rollup};
    {"DELETE FROM metering_teamhour;" if teams else ""}
    RETURN NULL;
END $$;
CREATE TRIGGER {rollup}_after_truncate AFTER TRUNCATE ON {table}
FOR EACH STATEMENT EXECUTE FUNCTION {rollup}_after_truncate();
"""


def _drop(table, rollup, *_) -> str:
    return (
        "".join(
            f"DROP TRIGGER IF EXISTS {rollup}_after_{event} ON {table};"
            f" DROP FUNCTION IF EXISTS {rollup}_after_{event}();"
            for event in ("insert", "delete", "update", "truncate")
        )
        + f" DROP FUNCTION IF EXISTS {rollup}_recompute(bigint[], timestamptz[]);"
    )


TEAM_HOURS = f"""
CREATE FUNCTION metering_teamhour_recompute(hours timestamptz[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF hours IS NULL THEN RETURN; END IF;
    {LOCK}
    DELETE FROM metering_teamhour WHERE hour_start = ANY(hours);
    INSERT INTO metering_teamhour (team_id, kind, hour_start, alloc_gpu_seconds, busy_gpu_seconds)
    SELECT t.team_id, t.kind, h.hour_start, sum(h.alloc_gpu_seconds), sum(h.busy_gpu_seconds)
    FROM metering_usagehour h JOIN metering_task t ON t.id = h.task_id
    WHERE h.hour_start = ANY(hours)
    GROUP BY t.team_id, t.kind, h.hour_start;
END $$;
CREATE FUNCTION metering_teamhour_after_task_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM metering_teamhour_recompute((
        SELECT array_agg(DISTINCT h.hour_start)
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        JOIN metering_usagehour h ON h.task_id = n.id
        WHERE n.team_id <> o.team_id OR n.kind <> o.kind));
    RETURN NULL;
END $$;
CREATE TRIGGER metering_teamhour_after_task_update AFTER UPDATE ON metering_task
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
EXECUTE FUNCTION metering_teamhour_after_task_update();
"""
TEAM_HOURS_DROP = (
    "DROP TRIGGER IF EXISTS metering_teamhour_after_task_update ON metering_task;"
    " DROP FUNCTION IF EXISTS metering_teamhour_after_task_update();"
    " DROP FUNCTION IF EXISTS metering_teamhour_recompute(timestamptz[]);"
)
ROLLUPS = (USAGE, CAPACITY, LATENCY)


# The rows already there, summed once (no trigger has fired on them).
BACKFILL = """
INSERT INTO metering_usagehour (task_id, hour_start, intervals, alloc_gpu_seconds,
    busy_gpu_seconds, memory_avg_bytes_sum, memory_peak_bytes, read_operations,
    write_operations, read_bytes, write_bytes)
SELECT task_id, date_trunc('hour', interval_start, 'UTC'), count(*), sum(alloc_gpu_seconds),
    sum(busy_gpu_seconds), sum(memory_avg_bytes), max(memory_peak_bytes), sum(read_operations),
    sum(write_operations), sum(read_bytes), sum(write_bytes)
FROM metering_usageinterval GROUP BY 1, 2;
INSERT INTO metering_capacityhour (source_id, hour_start, capacity_gpu_seconds)
SELECT source_id, date_trunc('hour', interval_start, 'UTC'), sum(capacity_gpu_seconds)
FROM metering_capacityinterval GROUP BY 1, 2;
INSERT INTO metering_latencyhourbucket (service_id, hour_start, le, count, intervals)
SELECT l.service_id, date_trunc('hour', l.interval_start, 'UTC'), b.bucket ->> 0,
    sum((b.bucket ->> 1)::numeric), count(*)
FROM metering_latencyinterval l CROSS JOIN LATERAL jsonb_array_elements(l.buckets) AS b(bucket)
GROUP BY 1, 2, 3;
"""
# When the backfill's insert into metering_usagehour fired the team trigger, the team level
# is already there; run on its own (tests), it fills it.
BACKFILL_TEAMS = """
DELETE FROM metering_teamhour;
INSERT INTO metering_teamhour (team_id, kind, hour_start, alloc_gpu_seconds, busy_gpu_seconds)
SELECT t.team_id, t.kind, h.hour_start, sum(h.alloc_gpu_seconds), sum(h.busy_gpu_seconds)
FROM metering_usagehour h JOIN metering_task t ON t.id = h.task_id GROUP BY 1, 2, 3;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0002_latencyinterval_p99_seconds"),
    ]

    operations = [
        migrations.CreateModel(
            name="CapacityHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("capacity_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                (
                    "source",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="capacity_hours",
                        to="metering.source",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_ca_hour_st_b4ea6c_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("source", "hour_start"), name="capacityhour_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="LatencyHourBucket",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("le", models.CharField(max_length=64)),
                ("count", metering.models.UnboundedDecimalField(decimal_places=0, max_digits=1000)),
                ("intervals", models.PositiveIntegerField()),
                (
                    "service",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="latency_hour_buckets",
                        to="metering.service",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_la_hour_st_e3b192_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("service", "hour_start", "le"), name="latencyhourbucket_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="UsageHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("intervals", models.PositiveIntegerField()),
                ("alloc_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                ("busy_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                ("memory_avg_bytes_sum", models.DecimalField(decimal_places=0, max_digits=30)),
                ("memory_peak_bytes", models.BigIntegerField()),
                ("read_operations", models.DecimalField(decimal_places=0, max_digits=30)),
                ("write_operations", models.DecimalField(decimal_places=0, max_digits=30)),
                ("read_bytes", models.DecimalField(decimal_places=0, max_digits=30)),
                ("write_bytes", models.DecimalField(decimal_places=0, max_digits=30)),
                (
                    "task",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="usage_hours",
                        to="metering.task",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_us_hour_st_649cc2_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("task", "hour_start"), name="usagehour_unique")
                ],
            },
        ),
        migrations.CreateModel(
            name="TeamHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("inference", "Inference"),
                            ("training_interactive", "Training (interactive)"),
                            ("training_batch", "Training (batch)"),
                            ("preprocessing", "Preprocessing"),
                        ],
                        max_length=32,
                    ),
                ),
                ("hour_start", models.DateTimeField()),
                ("alloc_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                ("busy_gpu_seconds", models.DecimalField(decimal_places=6, max_digits=24)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="usage_hours",
                        to="metering.team",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["hour_start"], name="metering_te_hour_st_d325e8_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("team", "kind", "hour_start"), name="teamhour_unique"
                    )
                ],
            },
        ),
        migrations.RunSQL(
            TEAM_HOURS + "".join(_functions(*rollup) for rollup in ROLLUPS),
            "".join(_drop(*rollup) for rollup in ROLLUPS) + TEAM_HOURS_DROP,
        ),
        migrations.RunSQL(BACKFILL + BACKFILL_TEAMS, migrations.RunSQL.noop),
    ]
