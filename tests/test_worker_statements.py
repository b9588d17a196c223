"""A worker forgets the statements Django recorded once a task ends, as a request's start does.

With DEBUG on (the demo's default) Django keeps the text of up to 9,000 statements per
connection; a shard's staging statement carries its whole observation, and a worker that never
let them go grew by tens of MB a task (a 10,000-GPU day in two shards peaked at 1.7 GB).
"""

from __future__ import annotations

import pytest
from django.db import connection

from metering.models import Source
from metering.tasks import ingest_window


@pytest.mark.django_db
def test_it_forgets_the_statements_a_task_left_recorded() -> None:
    connection.force_debug_cursor = True  # record as DEBUG on does
    try:
        Source.objects.count()
        assert connection.queries_log, "the statement was not recorded"
        result = ingest_window.apply(args=(987_654_321,))  # a task as a worker runs it
        assert result.successful()
        assert not connection.queries_log
    finally:
        connection.force_debug_cursor = False
