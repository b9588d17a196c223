"""A pod's wait is kept per incarnation: the same pod name come back (a StatefulSet's
`name-0` recreated, the next month's run of a job that names its pods alike) is another pod,
created anew, and must not overwrite the earlier one's wait, which a closed month's health
numbers counted. Writing the same incarnation again (a window re-ingested) replaces it."""

from __future__ import annotations

import datetime as dt

import pytest

from metering.models import PodWait
from metering.writer import _waits_insert
from tests.factories import T0, TaskFactory

pytestmark = pytest.mark.django_db


def _wait(task_id: int, created: dt.datetime, seconds: int) -> tuple:
    scheduled = created + dt.timedelta(seconds=seconds)
    return (task_id, "worker-0", created, scheduled, scheduled, seconds)


def test_it_keeps_the_wait_of_each_pod_of_the_same_name() -> None:
    task = TaskFactory()
    october, november = T0, T0 + dt.timedelta(days=31)
    _waits_insert([_wait(task.pk, october, 272)])
    _waits_insert([_wait(task.pk, november, 73)])
    assert sorted(PodWait.objects.values_list("created", "seconds")) == [
        (october, 272),
        (november, 73),
    ]


def test_it_replaces_the_wait_of_the_same_pod_written_again() -> None:
    task = TaskFactory()
    _waits_insert([_wait(task.pk, T0, 272)])
    _waits_insert([_wait(task.pk, T0, 275)])  # re-ingested: the same pod, scheduled later
    assert list(PodWait.objects.values_list("created", "seconds")) == [(T0, 275)]
