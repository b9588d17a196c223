"""GPU classes of a price book (docs/pricing.md version 2), immutable with their published book.

Triggers refuse any insert, update or delete of a class whose book (before or after the
change) is published, as migration 0002 does for the book itself, and (at commit) a GPU
model that two classes of one book take. Books that exist keep no classes: they
price, and their closed periods re-price, exactly as before.
"""

import django.db.models.deletion
from django.db import migrations, models

FORWARD = [
    """
    CREATE FUNCTION billing_refuse_published_gpu_class_change() RETURNS trigger AS $$
    DECLARE
        published_version integer;
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            SELECT version INTO published_version FROM billing_pricebook
                WHERE id = OLD.price_book_id AND status = 'published';
            IF FOUND THEN
                RAISE EXCEPTION 'price book v% is published: its GPU classes cannot be changed or deleted; create a new version', published_version
                    USING ERRCODE = 'restrict_violation';
            END IF;
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        SELECT version INTO published_version FROM billing_pricebook
            WHERE id = NEW.price_book_id AND status = 'published';
        IF FOUND THEN
            RAISE EXCEPTION 'price book v% is published: no GPU class can be added to it; create a new version', published_version
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE TRIGGER billing_pricebookgpuclass_published_immutable
        BEFORE INSERT OR UPDATE OR DELETE ON billing_pricebookgpuclass
        FOR EACH ROW EXECUTE FUNCTION billing_refuse_published_gpu_class_change();
    """,
    # Checked at commit: a save that moves a model from one class to another passes through
    # a moment where both hold it.
    """
    CREATE FUNCTION billing_refuse_gpu_model_in_two_classes() RETURNS trigger AS $$
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
             AND jsonb_typeof(other.models) = 'array' AND other.models ? model
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
    """,
    """
    CREATE CONSTRAINT TRIGGER billing_pricebookgpuclass_model_in_one_class
        AFTER INSERT OR UPDATE ON billing_pricebookgpuclass
        DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION billing_refuse_gpu_model_in_two_classes();
    """,
]
BACKWARD = [
    "DROP TRIGGER billing_pricebookgpuclass_model_in_one_class ON billing_pricebookgpuclass;",
    "DROP FUNCTION billing_refuse_gpu_model_in_two_classes();",
    "DROP TRIGGER billing_pricebookgpuclass_published_immutable ON billing_pricebookgpuclass;",
    "DROP FUNCTION billing_refuse_published_gpu_class_change();",
]


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_period_close_incomplete")]

    operations = [
        migrations.CreateModel(
            name="PriceBookGpuClass",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(help_text="What statements call it, e.g. H100", max_length=64),
                ),
                ("depreciation_per_gpu_hour", models.DecimalField(decimal_places=6, max_digits=14)),
                ("facility_per_gpu_hour", models.DecimalField(decimal_places=6, max_digits=14)),
                ("gpu_average_power_kw", models.DecimalField(decimal_places=6, max_digits=14)),
                (
                    "reserved_inference_share",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Share of this class reserved for inference; empty: the book's share",
                        max_digits=7,
                        null=True,
                    ),
                ),
                (
                    "models",
                    models.JSONField(
                        help_text='dcgm-exporter modelName values it takes, exact strings: ["NVIDIA L40S"]'
                    ),
                ),
                (
                    "price_book",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="gpu_classes",
                        to="billing.pricebook",
                    ),
                ),
            ],
            options={
                "verbose_name": "GPU class",
                "verbose_name_plural": "GPU classes",
                "ordering": ["price_book", "name"],
                "constraints": [
                    models.UniqueConstraint(
                        deferrable=models.Deferrable.DEFERRED,
                        fields=("price_book", "name"),
                        name="gpu_class_name_unique",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("name", "default"), _negated=True),
                            models.Q(("name", ""), _negated=True),
                        ),
                        name="gpu_class_name_not_default",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("depreciation_per_gpu_hour__gte", 0),
                            ("facility_per_gpu_hour__gte", 0),
                            ("gpu_average_power_kw__gte", 0),
                        ),
                        name="gpu_class_prices_not_negative",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("reserved_inference_share__isnull", True),
                            models.Q(
                                ("reserved_inference_share__gte", 0),
                                ("reserved_inference_share__lte", 1),
                            ),
                            _connector="OR",
                        ),
                        name="gpu_class_share_between_0_and_1",
                    ),
                ],
            },
        ),
        migrations.RunSQL(sql=FORWARD, reverse_sql=BACKWARD),
    ]
