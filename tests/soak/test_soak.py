"""Faults (issue 7): the real stack on loopback, every fault injected, then every row of the
soak's database reconciled against a fault-free ingest of the same Prometheus."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.soak.harness import SoakResult, compare_rows

FAULTS = {
    "duplicate delivery",
    "worker SIGKILL",
    "redis restart",
    "prometheus stopped",
    "prometheus restarted",
    "exporter silent",
    "postgres restart",
}
pytestmark = pytest.mark.slow


def test_it_injects_every_fault(soak_result: SoakResult) -> None:
    assert soak_result.fault_kinds == FAULTS, soak_result.table()
    assert not [p for p in soak_result.problems if "no window was" in p], soak_result.table()


def test_it_completes_every_window(soak_result: SoakResult) -> None:
    assert soak_result.windows_expected >= 8, soak_result.table()
    assert soak_result.windows_missing == [], soak_result.table()
    assert soak_result.windows_not_done == [], soak_result.table()
    assert soak_result.windows_done == soak_result.windows_expected, soak_result.table()
    # Outside Prometheus' outage every window is exactly as complete as the fault-free ingest
    # of the same Prometheus: the faults lost no sample. (Not "every window complete": on a
    # loaded machine the simulator can miss scrapes, which Prometheus records as failed and
    # both ingests count alike; the table lists such windows with their warnings.)
    assert soak_result.windows_completeness_differing == [], soak_result.table()
    assert soak_result.max_completeness_outside_outage is not None
    assert soak_result.max_completeness_outside_outage == 1, soak_result.table()
    # The silent exporter's windows are short, and each short window says why.
    assert soak_result.incomplete_windows, soak_result.table()
    assert not [w for w in soak_result.incomplete_windows if w.endswith("no warning")], (
        soak_result.table()
    )


def test_it_retried_the_windows_the_faults_hit(soak_result: SoakResult) -> None:
    # The killed worker's window and the outage's windows ran more than once.
    assert soak_result.windows_retried >= 2, soak_result.table()


def test_it_loses_no_row(soak_result: SoakResult) -> None:
    assert soak_result.rows_checked > 0, soak_result.table()
    assert soak_result.rows_lost == 0, soak_result.table()


def test_it_duplicates_no_row(soak_result: SoakResult) -> None:
    assert soak_result.rows_duplicated == 0, soak_result.table()
    assert soak_result.rows_differing == 0, soak_result.table()
    assert soak_result.windows_changed_after_first_write == 0, soak_result.table()
    assert soak_result.ok, soak_result.table()


def test_it_counts_lost_duplicated_and_differing_rows() -> None:
    """The reconciliation itself: each kind of disagreement is counted, agreement is not."""
    moment = datetime(2026, 11, 30, tzinfo=UTC)
    check = [("a", moment, 1), ("b", moment, 2), ("c", moment, 3)]
    soak = [("a", moment, 1), ("a", moment, 1), ("c", moment, 4), ("d", moment, 5)]
    result = SoakResult()
    compare_rows(result, "usage", soak, check, 2)
    assert (result.rows_lost, result.rows_duplicated, result.rows_differing) == (1, 2, 1)
    assert result.rows_checked == 3
    clean = SoakResult()
    compare_rows(clean, "usage", check, list(reversed(check)), 2)
    assert clean.ok and clean.rows_checked == 3
