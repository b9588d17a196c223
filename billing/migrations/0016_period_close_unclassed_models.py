"""GPU models that no class of a close's book lists (PeriodClose.unclassed_gpu_seconds and
unclassed_gpu_models), and a book's classes compared by a model's key: the trigger of
migration 0004 refused one model name in two classes; it now refuses two spellings of one
model too ("NVIDIA H100 80GB HBM3" and "h100  80GB HBM3"), as kernel.gpu_models.gpu_model_key
makes them equal (the "NVIDIA " prefix, whitespace and case aside). Published books never
change, so it only judges classes written from now on."""

from django.db import migrations, models

# kernel.gpu_models.gpu_model_key in SQL (the same for the ASCII of NVML's device names).
KEY = """
    CREATE FUNCTION billing_gpu_model_key(model text) RETURNS text AS $$
        SELECT regexp_replace(lower(btrim(regexp_replace(model, '\\s+', ' ', 'g'))), '^nvidia ', '')
    $$ LANGUAGE sql IMMUTABLE STRICT;
"""

CHECK = """
    CREATE OR REPLACE FUNCTION billing_refuse_gpu_model_in_two_classes() RETURNS trigger AS $$
    DECLARE
        taken text;
        first_class text;
        second_class text;
    BEGIN
        SELECT model, one.name, other.name INTO taken, first_class, second_class
            FROM billing_pricebookgpuclass AS one
            CROSS JOIN LATERAL jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(one.models) = 'array' THEN one.models ELSE '[]' END
            ) AS model
            JOIN billing_pricebookgpuclass AS other
              ON other.price_book_id = one.price_book_id AND other.id <> one.id
             AND jsonb_typeof(other.models) = 'array'
             AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(other.models) AS listed
                         WHERE billing_gpu_model_key(listed) = billing_gpu_model_key(model))
            WHERE one.price_book_id = NEW.price_book_id
            LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'GPU model % is in two classes of one price book: % and %', taken, first_class, second_class
                USING ERRCODE = 'unique_violation';
        END IF;
        IF EXISTS (SELECT 1 FROM billing_pricebookgpuclass
                   WHERE id = NEW.id AND jsonb_typeof(models) <> 'array') THEN
            RAISE EXCEPTION 'GPU class %: models must be a list of GPU model names', NEW.name
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql;
"""

# Migration 0004's check: by the exact name.
CHECK_BEFORE = CHECK.replace(
    """AND jsonb_typeof(other.models) = 'array'
             AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(other.models) AS listed
                         WHERE billing_gpu_model_key(listed) = billing_gpu_model_key(model))""",
    "AND jsonb_typeof(other.models) = 'array' AND other.models ? model",
)


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0015_period_scenario_task_kinds'),
    ]

    operations = [
        migrations.AddField(
            model_name='periodclose',
            name='unclassed_gpu_models',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='periodclose',
            name='unclassed_gpu_seconds',
            field=models.DecimalField(db_default=0, decimal_places=6, default=0, max_digits=18),
        ),
        migrations.AlterField(
            model_name='pricebookgpuclass',
            name='models',
            field=models.JSONField(help_text='dcgm-exporter modelName values it takes: ["NVIDIA L40S"] (the "NVIDIA " prefix, spaces and case aside: it takes "L40S" too)'),
        ),
        migrations.RunSQL(
            [KEY, CHECK],
            [CHECK_BEFORE, "DROP FUNCTION billing_gpu_model_key(text);"],
        ),
    ]
