"""The database itself refuses to change published price books and closed periods.

Triggers, not only model guards: a raw SQL UPDATE, another service or a manual fix in psql
must not be able to edit what finance has been given. TRUNCATE is left alone (test database
flushes), and draft price books stay editable. Also creates the default price book v1
(docs/pricing.md's example values) when the database has none, so a fresh install can close a month.
"""

from django.conf import settings
from django.db import migrations
from django.utils import timezone

CLOSED_TABLES = [
    "billing_periodclose",
    "billing_periodscenario",
    "billing_statement",
    "billing_statementline",
    "billing_statementlinetask",
    "billing_platformline",
    "billing_slabreach",
]

FORWARD = [
    """
    CREATE FUNCTION billing_refuse_published_price_book_change() RETURNS trigger AS $$
    BEGIN
        IF OLD.status = 'published' THEN
            RAISE EXCEPTION 'price book v% is published and cannot be changed or deleted; create a new version', OLD.version
                USING ERRCODE = 'restrict_violation';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE TRIGGER billing_pricebook_published_immutable
        BEFORE UPDATE OR DELETE ON billing_pricebook
        FOR EACH ROW EXECUTE FUNCTION billing_refuse_published_price_book_change();
    """,
    """
    CREATE FUNCTION billing_refuse_closed_period_change() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION '% rows belong to a closed period and cannot be changed or deleted', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END
    $$ LANGUAGE plpgsql;
    """,
] + [
    f"""
    CREATE TRIGGER {table}_immutable
        BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION billing_refuse_closed_period_change();
    """
    for table in CLOSED_TABLES
]

BACKWARD = [f"DROP TRIGGER {table}_immutable ON {table};" for table in CLOSED_TABLES] + [
    "DROP FUNCTION billing_refuse_closed_period_change();",
    "DROP TRIGGER billing_pricebook_published_immutable ON billing_pricebook;",
    "DROP FUNCTION billing_refuse_published_price_book_change();",
]


def create_default_price_book(apps, schema_editor) -> None:
    from billing.defaults import DEFAULT_EFFECTIVE_FROM, DEFAULT_PRICE_BOOK

    PriceBook = apps.get_model("billing", "PriceBook")
    if PriceBook.objects.exists():
        return
    PriceBook.objects.create(
        version=1,
        effective_from=DEFAULT_EFFECTIVE_FROM,
        status="published",
        published_at=timezone.now(),
        timezone=settings.TANDEM_TIMEZONE,
        notes="Default book: the example values of docs/pricing.md.",
        **DEFAULT_PRICE_BOOK,
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [
        migrations.RunSQL(sql=FORWARD, reverse_sql=BACKWARD),
        migrations.RunPython(create_default_price_book, migrations.RunPython.noop),
    ]
