"""Monthly partitions seen from billing: a close reads one month's partitions, and a closed
month archived with `archive_month` still re-prices from its archive, byte for byte."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from billing.models import PriceBook
from billing.scenarios import scenario_build
from billing.selectors import period_bounds, period_verification
from billing.services import period_close
from metering import partitions
from metering.models import CapacityInterval, LatencyInterval, UsageHour, UsageInterval
from tests.helpers import command_output

pytestmark = pytest.mark.django_db
SEPTEMBER = "2026-09"


@pytest.fixture
def september_partitioned(boundary_pool) -> partitions.Month:
    """The pool's September moved from the default partitions into a partition of its own,
    as beat would have created it ahead of the month."""
    month = partitions.month_of(SEPTEMBER)
    partitions.month_partitions_ensure(month)
    return month


@pytest.fixture
def closed(september_partitioned):
    return period_close(period=SEPTEMBER).period_close


def _relations_scanned(plan: dict) -> set[str]:
    found = {plan["Relation Name"]} if "Relation Name" in plan else set()
    for child in plan.get("Plans", []):
        found |= _relations_scanned(child)
    return found


def test_it_scans_only_the_months_partitions_when_a_close_reads_it(september_partitioned):
    bounds = period_bounds(SEPTEMBER)
    with CaptureQueriesContext(connection) as captured:
        scenario_build(
            start=bounds.start, end=bounds.end, price_book=PriceBook.objects.get(version=1)
        )
    scanned: set[str] = set()
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if "interval" not in query["sql"]:
                continue
            cursor.execute(f"EXPLAIN (FORMAT JSON) {query['sql']}")
            scanned |= _relations_scanned(cursor.fetchone()[0][0]["Plan"])

    interval_tables = {name for name in scanned if "interval" in name}
    assert interval_tables == {
        "metering_usageinterval_p2026_09",
        "metering_capacityinterval_p2026_09",
        "metering_latencyinterval_p2026_09",
    }


def test_it_moves_the_months_rows_out_of_the_default_partition(september_partitioned):
    month = september_partitioned
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM metering_usageinterval"
            " WHERE interval_start >= %s AND interval_start < %s",
            [month.start, month.end],
        )
        assert cursor.fetchall() == [("metering_usageinterval_p2026_09",)]
    assert partitions.month_partitions_ensure(month) == []  # idempotent


def test_it_archives_a_closed_month_and_reprices_it_from_the_archive(closed, tmp_path: Path):
    month = partitions.month_of(SEPTEMBER)
    rows = UsageInterval.objects.filter(
        interval_start__gte=month.start, interval_start__lt=month.end
    ).count()

    output = command_output("archive_month", SEPTEMBER, "--to", str(tmp_path))

    folder = tmp_path / SEPTEMBER
    assert f"{SEPTEMBER}: archived to {folder}" in output
    manifest = json.loads((folder / "manifest.json").read_text())
    usage = next(t for t in manifest["tables"] if t["table"] == "metering_usageinterval")
    assert rows > 0 and usage["rows"] == rows
    assert len((folder / usage["file"]).read_bytes().splitlines()) == rows
    assert {t["table"] for t in manifest["tables"]} == set(partitions.PARTITIONED)
    for table in partitions.PARTITIONED:
        assert partitions.partition_name(table, month) not in partitions.partitions_of(table)
    assert not UsageInterval.objects.filter(interval_start__lt=month.end).exists()
    assert not UsageHour.objects.filter(hour_start__lt=month.end).exists()

    assert not period_verification(SEPTEMBER).ok  # the tables no longer hold the month
    assert period_verification(SEPTEMBER, archive=folder).ok
    assert (
        command_output("verify_period", "--period", SEPTEMBER, "--archive", str(folder))
        .strip()
        .endswith(f"{SEPTEMBER}: no difference")
    )
    # The archive was loaded for the verification only.
    assert not UsageInterval.objects.filter(interval_start__lt=month.end).exists()
    assert not CapacityInterval.objects.filter(interval_start__lt=month.end).exists()
    assert not LatencyInterval.objects.filter(interval_start__lt=month.end).exists()


def test_it_refuses_to_archive_a_month_that_is_not_closed(september_partitioned, tmp_path):
    with pytest.raises(CommandError, match="period 2026-09 is not closed"):
        call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())

    assert list(tmp_path.iterdir()) == []
    assert "metering_usageinterval_p2026_09" in partitions.partitions_of("metering_usageinterval")


def test_it_refuses_to_archive_a_month_twice_into_one_folder(closed, tmp_path):
    call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())

    with pytest.raises(CommandError, match="archived there already"):
        call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())


def test_it_refuses_to_reprice_from_an_archive_whose_file_changed(closed, tmp_path):
    call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())
    copy = tmp_path / SEPTEMBER / "metering_usageinterval.copy"
    copy.write_bytes(copy.read_bytes().replace(b"\t300", b"\t299", 1))

    with pytest.raises(CommandError, match=r"metering_usageinterval\.copy: .* the manifest says"):
        call_command(
            "verify_period",
            "--period",
            SEPTEMBER,
            "--archive",
            str(tmp_path / SEPTEMBER),
            stdout=io.StringIO(),
        )


def test_it_refuses_to_load_an_archive_over_rows_of_its_month(closed, tmp_path):
    call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())
    folder = tmp_path / SEPTEMBER

    with partitions.archive_loaded(folder):
        with pytest.raises(partitions.ArchiveError, match="still holds rows of 2026-09"):
            with partitions.archive_loaded(folder):
                pass


def test_it_refuses_to_archive_a_month_whose_metering_changed_since_its_close(closed, tmp_path):
    month = partitions.month_of(SEPTEMBER)
    UsageInterval.objects.filter(interval_start__gte=month.start).update(
        alloc_gpu_seconds=F("alloc_gpu_seconds") / 2
    )

    with pytest.raises(CommandError, match="2026-09 does not verify, so it is not archived"):
        call_command("archive_month", SEPTEMBER, "--to", str(tmp_path), stdout=io.StringIO())

    assert list(tmp_path.iterdir()) == []
    assert "metering_usageinterval_p2026_09" in partitions.partitions_of("metering_usageinterval")
