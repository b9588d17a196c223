"""The demo cuts a month into parts that promtool back-fills side by side: nothing may change."""

from __future__ import annotations

import pytest

from simulator.pool import simulate
from simulator.prometheus import backfill_parts, running_prometheus
from simulator.truth import device_count
from tests.simulator.conftest import SMALL_POOL
from tests.simulator.test_openmetrics import epoch, query

# Every test here starts Prometheus, a Celery worker or Chromium (tests/slow.py).
pytestmark = pytest.mark.slow


def samples_of(paths) -> list[bytes]:
    lines: list[bytes] = []
    for path in paths:
        with open(path, "rb") as source:
            content = source.read()
        assert content.endswith(b"# EOF\n")
        lines += [line for line in content.splitlines() if not line.startswith(b"#")]
    return lines


def test_it_cuts_the_same_samples_into_day_parts_that_back_fill_side_by_side(
    small_pool, tmp_path
) -> None:
    parted = simulate(SMALL_POOL, tmp_path / "parts", part_days=1)

    assert [p.name for p in parted.metrics_paths] == [
        "metrics-01.om",
        "metrics-02.om",
        "metrics-03.om",
    ]
    assert samples_of(parted.metrics_paths) == samples_of([small_pool.result.metrics_path])
    assert parted.truth_path.read_bytes() == small_pool.result.truth_path.read_bytes()

    tsdb = tmp_path / "tsdb"
    backfill_parts(parted.metrics_paths, tsdb, workers=2)
    assert len([block for block in tsdb.iterdir() if block.is_dir()]) >= 3
    full = str(8 * 300) + ".000000"  # an interval in which every GPU was present
    interval = next(i for i, v in small_pool.truth["capacity"].items() if v == full)
    at = epoch(interval) + 240  # the interval's last tick
    with running_prometheus(
        tsdb, scrape_interval_seconds=SMALL_POOL.scrape_interval_seconds
    ) as url:
        (answer,) = query(url, "count(count by (UUID, GPU_I_ID) (DCGM_FI_DEV_FB_USED))", at)
    assert int(answer["value"][1]) == device_count(small_pool.truth)
