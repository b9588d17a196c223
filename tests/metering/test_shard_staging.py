"""A shard's staged row (metering.shards): written and read in binary, around Django's
client-side binding, and back byte for byte, whatever the bytes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection, transaction

from metering import shards
from metering.models import IngestBatch, IngestShard, Source

# A real staged observation's head, then every byte value (NUL, quotes, backslashes, high
# bytes), 1 MiB of them: what hex text or an escaping slip would change.
STAGED = shards.observation_dump(shards.Observation({}, set(), [], 0.0))
EVERY_BYTE = STAGED + bytes(range(256)) * 4096


@pytest.fixture
def pending_shard() -> IngestShard:
    source = Source.objects.create(name="staging", url="http://127.0.0.1:9")
    start = datetime(2026, 10, 1, tzinfo=UTC)
    batch = IngestBatch.objects.create(source=source, first_start=start, last_start=start, shards=1)
    return IngestShard.objects.create(batch=batch, index=0, nodes="all")


@pytest.mark.django_db
def test_it_stages_a_shards_bytes_and_reads_them_back_identical(pending_shard) -> None:
    with transaction.atomic():
        shards._observation_stage(pending_shard.pk, EVERY_BYTE)
    pending_shard.refresh_from_db()
    assert pending_shard.status == IngestShard.Status.STAGED
    assert bytes(pending_shard.observation) == EVERY_BYTE  # as Django's own cursor reads it
    assert shards._observation_staged(pending_shard.pk) == EVERY_BYTE
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_compression(observation) FROM metering_ingestshard WHERE id = %s",
            [pending_shard.pk],
        )
        (compression,) = cursor.fetchone()
    assert compression in {"lz4", "pglz"}  # compressed (migration 0016), not stored raw


@pytest.mark.django_db
def test_it_says_a_shard_is_gone_when_its_row_is(pending_shard) -> None:
    gone = pending_shard.pk
    pending_shard.delete()
    with pytest.raises(IngestShard.DoesNotExist, match=f"shard {gone} is gone"):
        shards._observation_staged(gone)
