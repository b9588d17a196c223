"""A pod's wait ends when it is scheduled or when it gives up waiting (gone, never scheduled):
`ended` holds either, `scheduled` only the first. Every stored wait is a scheduled one, so
its end is its scheduled time; the index moves to `ended`, which readers filter by."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0028_window_kueue_admissions"),
    ]

    operations = [
        migrations.AddField(
            model_name="podwait",
            name="ended",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunSQL("UPDATE metering_podwait SET ended = scheduled", migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="podwait",
            name="ended",
            field=models.DateTimeField(),
        ),
        migrations.AlterField(
            model_name="podwait",
            name="scheduled",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RemoveIndex(
            model_name="podwait",
            name="metering_po_schedul_c34acc_idx",
        ),
        migrations.AddIndex(
            model_name="podwait",
            index=models.Index(fields=["ended"], name="metering_po_ended_dc7db1_idx"),
        ),
        migrations.AddConstraint(
            model_name="podwait",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("scheduled__isnull", True), ("scheduled", models.F("ended")), _connector="OR"
                ),
                name="podwait_scheduled_ends_it",
            ),
        ),
    ]
