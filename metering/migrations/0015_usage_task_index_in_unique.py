"""The usage table's own index on the task goes: usage_unique (task, interval_start, gpu_model)
begins with the task and serves every lookup by task, the foreign key's checks included.

Only the index is dropped (the foreign key stays as it is, not re-validated over the table);
on the partitioned table, dropping the parent's index drops each partition's.
"""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "metering_usageinterval_task_id_f73e36ea"


class Migration(migrations.Migration):
    """UsageInterval.task without an index of its own (db_index=False)."""

    dependencies = [
        ("metering", "0014_ingest_queries_once_per_run"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {INDEX}",
                    f"CREATE INDEX IF NOT EXISTS {INDEX} ON metering_usageinterval (task_id)",
                )
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="usageinterval",
                    name="task",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="usage",
                        to="metering.task",
                    ),
                )
            ],
        )
    ]
