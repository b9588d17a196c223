"""Per-GPU-class parts of statement lines, immutable like the rest of a closed period, and
each close's capacity per GPU class.

The trigger reuses migration 0002's billing_refuse_closed_period_change(): any UPDATE or
DELETE of a part is refused by the database itself, as for the lines they belong to.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0006_preemption_history"),
    ]

    operations = [
        migrations.CreateModel(
            name="StatementLineClass",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("gpu_class", models.CharField(max_length=64)),
                ("quantity_gpu_seconds", models.DecimalField(decimal_places=30, max_digits=60)),
                ("quantity_gpu_hours", models.DecimalField(decimal_places=2, max_digits=20)),
                (
                    "rate_per_gpu_hour",
                    models.DecimalField(blank=True, decimal_places=30, max_digits=60, null=True),
                ),
                ("amount_unrounded", models.DecimalField(decimal_places=30, max_digits=60)),
                (
                    "line",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="classes",
                        to="billing.statementline",
                    ),
                ),
            ],
            options={
                "verbose_name": "statement line class part",
                "ordering": ["line", "gpu_class"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("line", "gpu_class"), name="statement_line_class_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("gpu_class", ""), _negated=True),
                        name="statement_line_class_named",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="periodclose",
            name="capacity_gpu_seconds_by_class",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunSQL(
            sql="""
            CREATE TRIGGER billing_statementlineclass_immutable
                BEFORE UPDATE OR DELETE ON billing_statementlineclass
                FOR EACH ROW EXECUTE FUNCTION billing_refuse_closed_period_change();
            """,
            reverse_sql=(
                "DROP TRIGGER billing_statementlineclass_immutable ON billing_statementlineclass;"
            ),
        ),
    ]
