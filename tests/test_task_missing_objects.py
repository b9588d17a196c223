"""A Celery task handed an id, a period or a time that names nothing logs one line and returns.

A worker may meet a message queued against another database, or for a row deleted since: that
is worth one clear line in the log, not a traceback (issue 15).
"""

from __future__ import annotations

import logging

import pytest

from billing.tasks import close_period, close_previous_month, refresh_month_to_date
from metering.tasks import ingest_shard, ingest_shards_combine, ingest_window, ingest_windows
from reports.tasks import report_run_execute

MISSING = 987_654_321


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("task", "args", "line"),
    [
        (report_run_execute, (MISSING,), f"report run {MISSING} does not exist; skipped"),
        (ingest_window, (MISSING,), f"ingest window {MISSING} does not exist; skipped"),
        (
            ingest_windows,
            ([MISSING, MISSING + 1],),
            f"ingest windows {MISSING}, {MISSING + 1} do not exist; skipped",
        ),
        (ingest_shard, (MISSING,), f"ingest shard {MISSING} does not exist; skipped"),
        (ingest_shards_combine, (MISSING,), f"ingest batch {MISSING} does not exist; skipped"),
        (close_period, ("2026-13",), "period '2026-13' is not a month (YYYY-MM); skipped"),
        (close_previous_month, ("yesterday",), "now 'yesterday' is not an ISO 8601 time; skipped"),
        (refresh_month_to_date, ("soon",), "now 'soon' is not an ISO 8601 time; skipped"),
    ],
    ids=[
        "report_run_execute",
        "ingest_window",
        "ingest_windows",
        "ingest_shard",
        "ingest_shards_combine",
        "close_period",
        "close_previous_month",
        "refresh_month_to_date",
    ],
)
def test_it_logs_one_line_for_a_missing_object_and_skips_it(task, args, line, caplog) -> None:
    caplog.set_level(logging.INFO)
    # apply() runs the task through Celery's tracer, as a worker does: an exception would fail
    # the result and log its traceback.
    result = task.apply(args=args)
    assert result.successful(), result.traceback
    assert result.result in ("skipped", [], None)
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert [record.getMessage() for record in warnings] == [line]
    assert warnings[0].exc_info is None
