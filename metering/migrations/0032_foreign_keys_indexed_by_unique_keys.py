"""Foreign keys lose the index Django gave each of them where the table's unique key begins
with the same column and serves every lookup by it (the foreign key's checks included), as
`usage_unique` does for the usage rows since migration 0015: the task's and source's rows
that every batch writes (the rollup's rows, a GPU's sighting, a task's row, the intervals,
preemptions, waits, the windows and their queries) keep one index fewer on each insert, and
on each update that cannot stay on its page.

Only the indexes go (the foreign keys stay as they are, not re-validated); on a partitioned
table, dropping the parent's index drops each partition's. `tests/metering/test_indexes.py`
checks that no metering table keeps an index another one begins with.
"""

import django.db.models.deletion
from django.db import migrations, models

# (model, field, related model, on_delete, related_name, table, index), each index covered by
# the unique key named after it.
DROPPED = (
    ("usagehour", "task", "metering.task", "DO_NOTHING", "usage_hours",
     "metering_usagehour", "metering_usagehour_task_id_c3a9fb13"),  # usagehour_unique
    ("teamhour", "team", "metering.team", "DO_NOTHING", "usage_hours",
     "metering_teamhour", "metering_teamhour_team_id_2b96b2ef"),  # teamhour_unique
    ("capacityhour", "source", "metering.source", "DO_NOTHING", "capacity_hours",
     "metering_capacityhour", "metering_capacityhour_source_id_c6b75794"),  # capacityhour_unique
    ("latencyhourbucket", "service", "metering.service", "DO_NOTHING", "latency_hour_buckets",
     "metering_latencyhourbucket", "metering_latencyhourbucket_service_id_24cde930"),
    ("capacityinterval", "source", "metering.source", "PROTECT", "capacity",
     "metering_capacityinterval", "metering_capacityinterval_source_id_53ba01f1"),
    ("latencyinterval", "service", "metering.service", "PROTECT", "latency",
     "metering_latencyinterval", "metering_latencyinterval_service_id_0587137f"),
    ("gpusighting", "source", "metering.source", "CASCADE", "gpu_sightings",
     "metering_gpusighting", "metering_gpusighting_source_id_68ba15c6"),
    ("task", "source", "metering.source", "PROTECT", "tasks",
     "metering_task", "metering_task_source_id_97f22311"),
    ("preemption", "task", "metering.task", "PROTECT", "preemptions",
     "metering_preemption", "metering_preemption_task_id_c471b0ee"),
    ("podwait", "task", "metering.task", "PROTECT", "waits",
     "metering_podwait", "metering_podwait_task_id_82bd0fcd"),
    ("ingestwindow", "source", "metering.source", "PROTECT", "windows",
     "metering_ingestwindow", "metering_ingestwindow_source_id_96c7c5bd"),
    ("ingestqueries", "source", "metering.source", "PROTECT", "ingest_queries",
     "metering_ingestqueries", "metering_ingestqueries_source_id_0da342e9"),
    ("ingestshard", "batch", "metering.ingestbatch", "CASCADE", "shard_rows",
     "metering_ingestshard", "metering_ingestshard_batch_id_0212ae8a"),
    ("service", "source", "metering.source", "PROTECT", "services",
     "metering_service", "metering_service_source_id_87e42618"),
)


def _operation(model, field, to, on_delete, related_name, table, index):
    return migrations.SeparateDatabaseAndState(
        database_operations=[
            migrations.RunSQL(
                f"DROP INDEX IF EXISTS {index}",
                f"CREATE INDEX IF NOT EXISTS {index} ON {table} ({field}_id)",
            )
        ],
        state_operations=[
            migrations.AlterField(
                model_name=model,
                name=field,
                field=models.ForeignKey(
                    db_index=False,
                    on_delete=getattr(django.db.models.deletion, on_delete),
                    related_name=related_name,
                    to=to,
                ),
            )
        ],
    )


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0031_fillfactor_updated_in_place"),
    ]

    operations = [_operation(*dropped) for dropped in DROPPED]
