"""What a source's windows record of the GPUs they count (`GpuSighting`): each write replaces
its windows' share of the spans, a run across a month's end is split into the two months'
rows, and two runs of one source writing at once lose nothing."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, transaction

from metering.models import GpuSighting, IngestWindow
from metering.writer import WindowRows, _sightings_replace
from tests.factories import SourceFactory

T0 = dt.datetime(2026, 9, 30, 23, 30, tzinfo=dt.UTC)  # 30 minutes before October (UTC)
STEP = dt.timedelta(seconds=300)


@pytest.fixture(autouse=True)
def five_minutes(settings) -> None:
    settings.TANDEM_STEP_SECONDS = 300


def window(source, k: int) -> IngestWindow:
    return IngestWindow(source_id=source.pk, start=T0 + k * STEP, end=T0 + (k + 1) * STEP)


def seen(source, uuid: str) -> dict[str, str]:
    """Month -> the multirange as PostgreSQL writes it."""
    rows = GpuSighting.objects.filter(source=source, uuid=uuid).values_list("month", "seen")
    return {f"{month:%Y-%m}": str(spans) for month, spans in rows}


def span(a: int, b: int) -> str:
    return f"[{(T0 + a * STEP).isoformat(' ')}, {(T0 + b * STEP).isoformat(' ')})"


@pytest.mark.django_db
def test_it_replaces_only_the_windows_written_and_splits_the_months() -> None:
    source = SourceFactory(name="s")
    _sightings_replace([(window(source, k), WindowRows(gpus={"GPU-a": "n1"})) for k in range(9)])
    assert seen(source, "GPU-a") == {
        "2026-09": "{" + span(0, 6) + "}",
        "2026-10": "{" + span(6, 9) + "}",
    }
    # Written again: window 2 without the GPU, window 4 with another, window 7 kept (a loss
    # refused: not among those written).
    _sightings_replace(
        [
            (window(source, 2), WindowRows(gpus={})),
            (window(source, 4), WindowRows(gpus={"GPU-b": "n2"})),
            (window(source, 6), WindowRows(gpus={"GPU-a": "n3"})),
        ]
    )
    assert seen(source, "GPU-a") == {
        "2026-09": "{" + span(0, 2) + ", " + span(3, 4) + ", " + span(5, 6) + "}",
        "2026-10": "{" + span(6, 9) + "}",
    }
    assert seen(source, "GPU-b") == {"2026-09": "{" + span(4, 5) + "}"}
    assert GpuSighting.objects.get(source=source, uuid="GPU-a", month="2026-10-01").node == "n3"
    # The GPU gone from every window it was in: its row goes.
    _sightings_replace([(window(source, 4), WindowRows())])
    assert seen(source, "GPU-b") == {}


@pytest.mark.django_db(transaction=True)
def test_it_loses_nothing_when_two_runs_of_a_source_write_at_once() -> None:
    """The first run holds its transaction open after writing; the second waits for its
    commit, then adds its windows to what the first wrote. (Its row locks alone would make it
    wait too; the source's lock is there against a deadlock, which this does not provoke.)"""
    source = SourceFactory(name="s")
    written = threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                _sightings_replace(
                    [(window(source, k), WindowRows(gpus={"GPU-a": "n1"})) for k in range(3)]
                )
                written.set()
                threading.Event().wait(1)
        except BaseException as error:  # reported by the test below
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert written.wait(10)
    with transaction.atomic():
        _sightings_replace(
            [(window(source, k), WindowRows(gpus={"GPU-a": "n1"})) for k in range(3, 6)]
        )
    thread.join()
    assert not errors
    assert seen(source, "GPU-a") == {"2026-09": "{" + span(0, 6) + "}"}
