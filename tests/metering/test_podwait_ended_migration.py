"""Migration 0029: a wait stored before it is a scheduled pod's, so it ends when the pod was
scheduled (`PodWait.ended`, which readers filter by); its figures do not move."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from metering.models import PodWait, Source, Task, Team
from tests.helpers import migrate_to

CREATED = dt.datetime(2026, 10, 1, 2, tzinfo=dt.UTC)


@pytest.mark.django_db(transaction=True)
def test_it_ends_the_waits_stored_before_it_when_their_pods_were_scheduled() -> None:
    source = Source.objects.create(name="old", url="http://127.0.0.1:9")
    team = Team.objects.create(name="search")
    task = Task.objects.create(
        source=source, external_id="trainer", team=team, kind="training_batch", first_seen=CREATED
    )
    migrate_to([("metering", "0028_window_kueue_admissions")])
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO metering_podwait (task_id, pod, created, scheduled, seconds)"
                " VALUES (%s, 'trainer-0', %s, %s, 600)",
                [task.pk, CREATED, CREATED + dt.timedelta(seconds=600)],
            )
    finally:
        migrate_to()
    assert list(PodWait.objects.values_list("pod", "scheduled", "ended", "seconds")) == [
        ("trainer-0", CREATED + dt.timedelta(seconds=600), CREATED + dt.timedelta(seconds=600), 600)
    ]
