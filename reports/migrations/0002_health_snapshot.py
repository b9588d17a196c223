"""The health numbers a period close stores for the monthly report, immutable like the close.

Closes stored before this migration get no snapshot (their report reads the numbers live and
says so): numbers read at migration time are not the month as it was closed.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0007_statement_line_classes'),
        ('reports', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='HealthSnapshot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('numbers', models.JSONField()),
                ('period_close', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='health_snapshot', to='billing.periodclose')),
            ],
            options={
                'abstract': False,
            },
        ),
        # The function is billing's (0002): rows of a closed period never change.
        migrations.RunSQL(
            """
            CREATE TRIGGER reports_healthsnapshot_immutable
                BEFORE UPDATE OR DELETE ON reports_healthsnapshot
                FOR EACH ROW EXECUTE FUNCTION billing_refuse_closed_period_change();
            """,
            "DROP TRIGGER reports_healthsnapshot_immutable ON reports_healthsnapshot;",
        ),
    ]
