from django.db import migrations

# The trigger of migration 0003 found the tasks whose team or kind changed by joining the
# statement's old and new rows on id. PostgreSQL has no statistics for transition tables and
# guesses one row each, so it joined them in a nested loop: every upsert of n tasks compared
# n x n rows. Ingest upserts every task active in a batch, so at 10,000 GPUs (about 4,100
# tasks a batch) the comparison took 3 s of each batch's 4 s write phase (16.7 M rows removed
# by the join filter, seen with auto_explain). EXCEPT hashes or sorts instead: the same rows,
# in linear time.


def _task_update_trigger(changed_hours: str) -> str:
    """The trigger function, recomputing the team hours that `changed_hours` selects."""
    return f"""
CREATE OR REPLACE FUNCTION metering_teamhour_after_task_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM metering_teamhour_recompute(({changed_hours}));
    RETURN NULL;
END $$;
"""


LINEAR = _task_update_trigger(
    """SELECT array_agg(DISTINCT h.hour_start) FROM metering_usagehour h
        WHERE h.task_id IN (SELECT id FROM (
            SELECT id, team_id, kind FROM new_rows
            EXCEPT SELECT id, team_id, kind FROM old_rows) AS changed)"""
)
# Migration 0003's query, for the reverse.
QUADRATIC = _task_update_trigger(
    """SELECT array_agg(DISTINCT h.hour_start)
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        JOIN metering_usagehour h ON h.task_id = n.id
        WHERE n.team_id <> o.team_id OR n.kind <> o.kind"""
)


class Migration(migrations.Migration):
    """The team rollup's trigger on task updates in linear time (see LINEAR)."""

    dependencies = [
        ("metering", "0011_podwait_per_incarnation"),
    ]

    operations = [migrations.RunSQL(LINEAR, QUADRATIC)]
