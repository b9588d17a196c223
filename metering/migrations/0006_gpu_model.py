"""The GPU model (dcgm-exporter's `modelName`) on usage and capacity rows and their hourly
rollup: one row per task, interval and model, and per source, fault domain, interval and
model; "" for every row already there (a GPU without a model name prices as `default`).

The rollup triggers of 0003 are replaced for usage and capacity: the same functions with the
model among the grouping columns. A recompute still deletes every rollup row of a (thing,
hour) and sums it again from the intervals, so it covers all of that hour's models. Readers
that don't care about the model sum over it, so their numbers are unchanged; the team level
(team x kind x hour) has no model.
"""

import importlib

from django.db import migrations, models

rollup = importlib.import_module("metering.migrations.0003_hourly_rollup")
HOUR = rollup.HOUR

USAGE = (
    "metering_usageinterval",
    "metering_usagehour",
    "task_id",
    rollup.USAGE[3] + ", gpu_model",
    rollup.USAGE[4] + ", gpu_model",
    "1, 2, 12",
    rollup.USAGE[6],
    "task_id, hour_start, gpu_model",
)
CAPACITY = (
    "metering_capacityinterval",
    "metering_capacityhour",
    "source_id",
    rollup.CAPACITY[3] + ", gpu_model",
    rollup.CAPACITY[4] + ", gpu_model",
    "1, 2, 4",
    rollup.CAPACITY[6],
    "source_id, hour_start, gpu_model",
)
OLD = (rollup.USAGE, rollup.CAPACITY)
NEW = (USAGE, CAPACITY)


def _sql(rollups) -> str:
    return "".join(rollup._functions(*r) for r in rollups)


def _drop(rollups) -> str:
    return "".join(rollup._drop(*r) for r in rollups)


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0005_source_ingest_from"),
    ]

    operations = [
        migrations.RunSQL(_drop(OLD), _sql(OLD)),
        migrations.RemoveConstraint(
            model_name="capacityhour",
            name="capacityhour_unique",
        ),
        migrations.RemoveConstraint(
            model_name="capacityinterval",
            name="capacity_unique",
        ),
        migrations.RemoveConstraint(
            model_name="usagehour",
            name="usagehour_unique",
        ),
        migrations.RemoveConstraint(
            model_name="usageinterval",
            name="usage_unique",
        ),
        migrations.AddField(
            model_name="capacityhour",
            name="gpu_model",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="capacityinterval",
            name="gpu_model",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="usagehour",
            name="gpu_model",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="usageinterval",
            name="gpu_model",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddConstraint(
            model_name="capacityhour",
            constraint=models.UniqueConstraint(
                fields=("source", "hour_start", "gpu_model"), name="capacityhour_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="capacityinterval",
            constraint=models.UniqueConstraint(
                fields=("source", "fault_domain", "interval_start", "gpu_model"),
                name="capacity_unique",
            ),
        ),
        migrations.AddConstraint(
            model_name="usagehour",
            constraint=models.UniqueConstraint(
                fields=("task", "hour_start", "gpu_model"), name="usagehour_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="usageinterval",
            constraint=models.UniqueConstraint(
                fields=("task", "interval_start", "gpu_model"), name="usage_unique"
            ),
        ),
        migrations.RunSQL(_sql(NEW), _drop(NEW)),
    ]
