from django.db import migrations, models


class Migration(migrations.Migration):
    """Closes record how their scenario was built; those before this migration were built by
    builder 1 (no `preemptions_before`), so verify re-builds them byte for byte."""

    dependencies = [
        ("billing", "0005_month_to_date_draft"),
    ]

    operations = [
        migrations.AddField(
            model_name="periodclose",
            name="scenario_builder_version",
            field=models.PositiveSmallIntegerField(default=1),
        ),
    ]
