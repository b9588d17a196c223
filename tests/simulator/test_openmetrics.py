"""metrics.om is what promtool accepts, and a real Prometheus reads the pool back from it."""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
import urllib.request

import pytest

from simulator.truth import device_count


def query(url: str, promql: str, at: int) -> list[dict]:
    params = urllib.parse.urlencode({"query": promql, "time": str(at)})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=30) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def epoch(iso_text: str) -> int:
    return int(dt.datetime.fromisoformat(iso_text.replace("Z", "+00:00")).timestamp())


def test_it_writes_one_sample_per_series_per_tick_and_ends_with_eof(small_pool):
    config, path = small_pool.config, small_pool.result.metrics_path
    s = config.scrape_interval_seconds
    with open(path, "rb") as source:
        source.seek(-64, 2)
        assert source.read().endswith(b"\n# EOF\n")
    seen_series: set[bytes] = set()
    tick, samples = None, 0
    with open(path, "rb") as source:
        for line in source:
            if line.startswith(b"#"):
                continue
            series, _, timestamp = line.rstrip().rpartition(b" ")
            series = series.rpartition(b" ")[0]
            if timestamp != tick:
                assert tick is None or int(timestamp) == int(tick) + s
                tick, seen_series = timestamp, set()
            assert series not in seen_series, series
            seen_series.add(series)
            samples += 1
    assert int(tick) == config.end_epoch - s  # ticks run over [start, end)
    assert samples == small_pool.truth["meta"]["samples_written"]


@pytest.mark.slow
def test_it_is_read_back_by_a_real_prometheus(small_pool, small_pool_prometheus):
    truth = small_pool.truth
    full = str(8 * 300) + ".000000"
    interval = next(i for i, v in truth["capacity"].items() if v == full)
    at = epoch(interval) + 240  # the interval's last tick

    devices = query(
        small_pool_prometheus, "count(count by (UUID, GPU_I_ID) (DCGM_FI_DEV_FB_USED))", at
    )
    # 7 GPUs reported whole or time-sliced, plus one MIG GPU split 3g+2g+1g+1g.
    assert int(devices[0]["value"][1]) == device_count(truth) == 7 + 4

    task_id, task = next((k, t) for k, t in truth["tasks"].items() if t["preemptions"])
    preemption = task["preemptions"][0]
    reasons = query(
        small_pool_prometheus,
        'kube_pod_status_reason{reason="PreemptionByScheduler"} == 1',
        epoch(preemption["at"]),
    )
    assert preemption["pod"] in {r["metric"]["pod"] for r in reasons}, task_id

    # With the look-back just under the scrape interval, series end where their samples end.
    gone = query(
        small_pool_prometheus,
        f'kube_pod_created{{pod="{preemption["pod"]}"}}',
        epoch(preemption["at"]) + 180,
    )
    assert gone == []
