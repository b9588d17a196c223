"""Store each latency interval's own P99, and fill it for the rows already there."""

from django.db import migrations, models

BATCH = 5000


def fill_p99(apps, schema_editor) -> None:
    # The live helper, not a copy: the stored P99 must be the pricing engine's quantile.
    import json

    from metering.services import latency_p99

    connection = schema_editor.connection
    # Histograms repeat (same counts in quiet intervals): compute each distinct one once.
    known: dict[str, object] = {}
    with connection.cursor() as read:
        read.execute(
            "SELECT id, buckets::text FROM metering_latencyinterval WHERE p99_seconds IS NULL"
        )
        while rows := read.fetchmany(BATCH):
            values = []
            for pk, text in rows:
                if text not in known:
                    known[text] = latency_p99(json.loads(text))
                if known[text] is not None:
                    values.append((pk, known[text]))
            if values:
                with connection.cursor() as write:
                    write.execute(
                        "UPDATE metering_latencyinterval l SET p99_seconds = v.p99"
                        " FROM unnest(%s::bigint[], %s::numeric[]) AS v(id, p99)"
                        " WHERE l.id = v.id",
                        [[pk for pk, _ in values], [p99 for _, p99 in values]],
                    )


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
