"""A shard's staged observation is bytes (metering.shards, staged form 2), compressed with lz4.

Staged form 1 was JSON text; rows staged so (an attempt in flight during the upgrade) keep
their bytes, and the combiner refuses them by their version, so the attempt starts again.

lz4 where the server was built with it (Debian's is): a shard's observation is written once
and read once, so lz4's faster compression wins over the slightly smaller rows of pglz, the
default. A server without lz4 keeps pglz.
"""

from django.db import migrations, models

TABLE = "metering_ingestshard"

LZ4 = f"""
DO $$ BEGIN
    ALTER TABLE {TABLE} ALTER COLUMN observation SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL has no lz4: staged observations use pglz';
END $$;
"""


class Migration(migrations.Migration):
    """IngestShard.observation: text -> bytea (UTF-8 of the old text), lz4 where there is."""

    dependencies = [
        ("metering", "0015_usage_task_index_in_unique"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"ALTER TABLE {TABLE} ALTER COLUMN observation DROP DEFAULT,"
                    " ALTER COLUMN observation TYPE bytea"
                    " USING convert_to(observation, 'UTF8')",
                    f"ALTER TABLE {TABLE} ALTER COLUMN observation TYPE text"
                    " USING convert_from(observation, 'UTF8')",
                ),
                migrations.RunSQL(LZ4, migrations.RunSQL.noop),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="ingestshard",
                    name="observation",
                    field=models.BinaryField(default=b""),
                ),
            ],
        )
    ]
