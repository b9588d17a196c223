"""Migration 0006: rows written before it get the model "" (and so does their hourly rollup),
and the replaced rollup triggers keep one rollup row per thing, hour and model."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection

from metering.models import (
    CapacityHour,
    CapacityInterval,
    Source,
    Task,
    Team,
    UsageHour,
    UsageInterval,
)
from tests.helpers import migrate_to

HOUR = dt.datetime(2026, 10, 1, 2, tzinfo=dt.UTC)


@pytest.mark.django_db(transaction=True)
def test_it_gives_rows_written_before_it_the_model_nothing_and_rolls_up_per_model() -> None:
    source = Source.objects.create(name="old", url="http://127.0.0.1:9")
    team = Team.objects.create(name="search")
    task = Task.objects.create(
        source=source, external_id="trainer", team=team, kind="training_batch", first_seen=HOUR
    )
    migrate_to([("metering", "0005_source_ingest_from")])
    try:
        with connection.cursor() as cursor:
            for minutes in (0, 5):
                cursor.execute(
                    "INSERT INTO metering_usageinterval (task_id, interval_start,"
                    " alloc_gpu_seconds, busy_gpu_seconds, memory_avg_bytes, memory_peak_bytes,"
                    " read_operations, write_operations, read_bytes, write_bytes)"
                    " VALUES (%s, %s, 300, 150, 0, 0, 0, 0, 0, 0)",
                    [task.pk, HOUR + dt.timedelta(minutes=minutes)],
                )
                cursor.execute(
                    "INSERT INTO metering_capacityinterval (source_id, fault_domain,"
                    " interval_start, gpus_present, capacity_gpu_seconds)"
                    " VALUES (%s, '', %s, 2, 600)",
                    [source.pk, HOUR + dt.timedelta(minutes=minutes)],
                )
    finally:
        migrate_to()

    assert set(UsageInterval.objects.values_list("gpu_model", flat=True)) == {""}
    assert set(CapacityInterval.objects.values_list("gpu_model", flat=True)) == {""}
    assert list(UsageHour.objects.values_list("gpu_model", "alloc_gpu_seconds")) == [
        ("", Decimal(600))
    ]
    assert list(CapacityHour.objects.values_list("gpu_model", "capacity_gpu_seconds")) == [
        ("", Decimal(1200))
    ]

    # The same task and interval on another model: a row of its own, and a rollup row of its
    # own (insert trigger); deleting the "" rows recomputes the hour, the other model stays.
    UsageInterval.objects.create(
        task=task, interval_start=HOUR, alloc_gpu_seconds=60, gpu_model="NVIDIA L40S"
    )
    CapacityInterval.objects.create(
        source=source,
        interval_start=HOUR,
        gpus_present=1,
        capacity_gpu_seconds=300,
        gpu_model="NVIDIA L40S",
    )
    assert dict(UsageHour.objects.values_list("gpu_model", "alloc_gpu_seconds")) == {
        "": Decimal(600),
        "NVIDIA L40S": Decimal(60),
    }
    assert dict(CapacityHour.objects.values_list("gpu_model", "capacity_gpu_seconds")) == {
        "": Decimal(1200),
        "NVIDIA L40S": Decimal(300),
    }
    UsageInterval.objects.filter(gpu_model="", interval_start=HOUR).delete()
    CapacityInterval.objects.filter(gpu_model="", interval_start=HOUR).delete()
    assert dict(UsageHour.objects.values_list("gpu_model", "alloc_gpu_seconds")) == {
        "": Decimal(300),
        "NVIDIA L40S": Decimal(60),
    }
    assert dict(CapacityHour.objects.values_list("gpu_model", "capacity_gpu_seconds")) == {
        "": Decimal(600),
        "NVIDIA L40S": Decimal(300),
    }
