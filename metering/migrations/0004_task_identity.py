"""Tasks keyed by source, namespace, name and team (see metering.models.Task).

Existing rows stay valid: their namespace is empty (it was never stored; the column defaults to
empty for raw SQL loads too) until ingest meets the same name under the same team again and
fills it in; `last_seen` starts at their last metered interval.
"""

from django.db import migrations, models

LAST_SEEN = """
UPDATE metering_task t SET last_seen = m.last
FROM (SELECT task_id, max(interval_start) AS last FROM metering_usageinterval GROUP BY 1) m
WHERE t.id = m.task_id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0003_hourly_rollup"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="task",
            name="task_unique_per_source",
        ),
        migrations.AddField(
            model_name="task",
            name="last_seen",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="task",
            name="namespace",
            field=models.CharField(blank=True, default="", db_default="", max_length=253),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.UniqueConstraint(
                fields=("source", "namespace", "external_id", "team"),
                name="task_unique_per_source_namespace_team",
            ),
        ),
        migrations.RunSQL(LAST_SEEN, migrations.RunSQL.noop),
    ]
