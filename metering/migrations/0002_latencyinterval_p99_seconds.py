"""Store each latency interval's own P99, and fill it for the rows already there."""

from django.db import migrations, models

def fill_p99(apps, schema_editor) -> None:
    # The live helper, not a copy: the stored P99 must be the pricing engine's quantile.
    from metering.services import latency_p99_fill

    latency_p99_fill()


class Migration(migrations.Migration):
    dependencies = [
        ("metering", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="latencyinterval",
            name="p99_seconds",
            field=models.DecimalField(blank=True, decimal_places=30, max_digits=50, null=True),
        ),
        migrations.RunPython(fill_p99, migrations.RunPython.noop),
    ]
