"""The usage rollup's insert trigger reads the inserted rows once.

Migration 0006's trigger grouped the statement's new rows twice: by task, hour and model for
the task level, then again, joined with every row's task, for the team level. The team level
is the task level summed by team: now one statement groups the new rows once (a CTE) and
feeds both, the team level from the grouped rows (about a twelfth as many at a five-minute
step). The same sums, exactly: a numeric sum of sums is the sum. `benchmarks/_write_phase.py`
on a kept 10,000-GPU x 3 h pool (146,107 usage rows): the ingest's usage COPYs took 1.16 s
under 0006's trigger (`manage.py migrate metering 0012`) and 1.09-1.11 s under this one.
"""

import importlib

from django.db import migrations

rollup = importlib.import_module("metering.migrations.0003_hourly_rollup")
models_ = importlib.import_module("metering.migrations.0006_gpu_model")

_, ROLLUP, _, COLUMNS, SUMS, GROUP, ADD, CONFLICT = models_.USAGE
TEAM_CONFLICT = """
    ON CONFLICT (team_id, kind, hour_start) DO UPDATE SET
        alloc_gpu_seconds = r.alloc_gpu_seconds + EXCLUDED.alloc_gpu_seconds,
        busy_gpu_seconds = r.busy_gpu_seconds + EXCLUDED.busy_gpu_seconds;"""
# 0003's team statement ends with this clause: the new one must add exactly as it did.
assert rollup.TEAM_ADD.endswith(TEAM_CONFLICT)


def _after_insert(body: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {ROLLUP}_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {rollup.LOCK}
    {body}
    RETURN NULL;
END $$;
"""


ONCE = _after_insert(
    f"""WITH hours ({COLUMNS}) AS (SELECT {SUMS} FROM new_rows GROUP BY {GROUP}),
    task_hours AS (
        INSERT INTO {ROLLUP} AS r ({COLUMNS}) SELECT {COLUMNS} FROM hours
        ON CONFLICT ({CONFLICT}) DO UPDATE SET {ADD}
    )
    INSERT INTO metering_teamhour AS r (team_id, kind, hour_start, alloc_gpu_seconds,
        busy_gpu_seconds)
    SELECT t.team_id, t.kind, h.hour_start, sum(h.alloc_gpu_seconds), sum(h.busy_gpu_seconds)
    FROM hours h JOIN metering_task t ON t.id = h.task_id GROUP BY 1, 2, 3{TEAM_CONFLICT}"""
)
# Migration 0006's function, for the reverse.
TWICE = _after_insert(
    f"""INSERT INTO {ROLLUP} AS r ({COLUMNS})
    SELECT {SUMS} FROM new_rows GROUP BY {GROUP}
    ON CONFLICT ({CONFLICT}) DO UPDATE SET {ADD};{rollup.TEAM_ADD}"""
)


class Migration(migrations.Migration):
    """The usage rollup's insert trigger groups the new rows once (see ONCE)."""

    dependencies = [
        ("metering", "0012_task_update_trigger_linear"),
    ]

    operations = [migrations.RunSQL(ONCE, TWICE)]
