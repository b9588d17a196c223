"""Room on each page for the new version of a row updated in place (HOT updates).

Every batch a worker writes updates, for each GPU it metered, the GPU's sighting of the month
(`GpuSighting`), for each task it metered, the task's row (`last_seen` and the times), and the
hourly rollup rows of the hours it touched; a live source does so every window. PostgreSQL
packs pages full by default, so each such update puts the new version on another page and a
new entry into every index of the table (four on each of these), and the indexes grow until
vacuum. With free room on the page, an update of columns no index holds stays on the page and
touches no index. The numbers are what each table's rows see: every sighting is updated by
every window, a task's and an hour's rows by the windows of their task and hour.

The setting applies to pages written from now on; `VACUUM FULL <table>` (which locks it)
repacks the existing ones. PostgreSQL takes no fillfactor on a partitioned table, so the
rollup tables' partitions that exist get it here, and those created later by
`metering.partitions` (ROLLUP_FILLFACTOR, the same 70).
"""

from django.db import migrations

UPDATED_IN_PLACE = {"metering_gpusighting": 50, "metering_task": 70}
ROLLUP_TABLES = (
    "metering_usagehour",
    "metering_teamhour",
    "metering_capacityhour",
    "metering_latencyhourbucket",
)


def _partitions(fillfactor: str) -> str:
    """Every partition of the rollup tables (the default one, and the months made so far)."""
    parents = ", ".join(f"'{table}'::regclass" for table in ROLLUP_TABLES)
    return (
        "DO $$ DECLARE part regclass; BEGIN"
        f" FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent IN ({parents})"
        f" LOOP EXECUTE format('ALTER TABLE %s {fillfactor}', part); END LOOP; END $$;"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0030_service_team_stated"),
    ]

    operations = [
        migrations.RunSQL(
            "".join(
                f"ALTER TABLE {table} SET (fillfactor = {value});"
                for table, value in UPDATED_IN_PLACE.items()
            )
            + _partitions("SET (fillfactor = 70)"),
            "".join(f"ALTER TABLE {table} RESET (fillfactor);" for table in UPDATED_IN_PLACE)
            + _partitions("RESET (fillfactor)"),
        ),
    ]
