# The kinds a closed month's tasks were priced as, kept per revision (see PeriodScenario).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0014_period_scenario_service_slos'),
    ]

    operations = [
        migrations.AddField(
            model_name='periodscenario',
            name='task_kinds',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
