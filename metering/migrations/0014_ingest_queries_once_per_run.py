"""A run's PromQL recorded once (IngestQueries), not copied onto each of its windows.

Windows written before keep their own copy in `IngestWindow.queries`
(`IngestWindow.recorded_queries` reads either); nothing is moved.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """IngestQueries, and each window's link to the record of the run that measured it."""

    dependencies = [
        ("metering", "0013_usage_insert_trigger_once"),
    ]

    operations = [
        migrations.CreateModel(
            name="IngestQueries",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("first_start", models.DateTimeField()),
                ("last_start", models.DateTimeField()),
                ("queries", models.JSONField(default=list)),
                ("recorded", models.DateTimeField()),
                (
                    "source",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="ingest_queries",
                        to="metering.source",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "ingest queries",
            },
        ),
        migrations.AddField(
            model_name="ingestwindow",
            name="measured_with",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="windows",
                to="metering.ingestqueries",
            ),
        ),
        migrations.AddIndex(
            model_name="ingestqueries",
            index=models.Index(
                fields=["source", "first_start"], name="metering_in_source__38f0d7_idx"
            ),
        ),
    ]
