"""`simulate_pool --serve`: the same pool live, scraped by a real Prometheus."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import urllib.parse
import urllib.request

import pytest

from simulator.config import PoolConfig, previous_calendar_month
from simulator.pool import Pool
from simulator.prometheus import free_port, running_prometheus
from simulator.serve import LivePool, make_server


@pytest.mark.slow
def test_it_serves_the_pool_to_a_scraping_prometheus(tmp_path):
    config = PoolConfig(
        gpus=6, days=1, start=dt.date(2026, 10, 1), seed=3, scrape_interval_seconds=15
    )
    live = LivePool(config, start_epoch=config.start_epoch, speed=300)
    port = free_port()
    server = make_server(live, port)
    threads = [threading.Thread(target=f, daemon=True) for f in (server.serve_forever, live.run)]
    for thread in threads:
        thread.start()
    try:
        first_tick, body = live.tick, ""
        deadline = time.monotonic() + 30
        while "vllm:" not in body and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                body = response.read().decode()
            time.sleep(0.2)
        assert "# TYPE DCGM_FI_DEV_FB_USED gauge" in body
        # Replicas are scheduled a tick after they are created: the clock moved on.
        assert "# TYPE vllm:e2e_request_latency_seconds histogram" in body
        assert live.tick > first_tick

        target = f"127.0.0.1:{port}"
        with running_prometheus(
            tmp_path / "tsdb", scrape_targets=[target], scrape_interval_seconds=1
        ) as url:
            devices = 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not devices:
                query = urllib.parse.urlencode(
                    {"query": "count(count by (UUID, GPU_I_ID) (DCGM_FI_DEV_FB_USED))"}
                )
                with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
                    result = json.load(answer)["data"]["result"]
                devices = int(result[0]["value"][1]) if result else 0
                time.sleep(0.5)
        assert devices == len(live.pool.devices) == 5 + 4  # one MIG GPU in four instances
    finally:
        live.stopped.set()
        server.shutdown()
        server.server_close()


def test_it_keeps_memory_flat_when_live():
    config = PoolConfig(
        gpus=8, days=1, start=dt.date(2026, 10, 1), seed=2, scrape_interval_seconds=300
    )
    pool = Pool(config)
    live_tasks = []
    for t in range(config.start_epoch + 300, config.start_epoch + 5 * 86400, 300):
        pool.step(t)
        if t % 3600 == 0:
            pool.forget_history()
            live_tasks.append(len(pool.tasks))
    # Every Job that ever ran would still be known without forgetting: hundreds by now.
    assert max(live_tasks[-24:]) < 60
    assert all(len(task.alloc_units) <= 12 for task in pool.tasks.values())
    assert sum(1 for task in pool.tasks.values() if task.alloc_units) > 0


def test_it_knows_the_previous_calendar_month():
    assert previous_calendar_month(dt.date(2026, 11, 30)) == (dt.date(2026, 10, 1), 31)
    assert previous_calendar_month(dt.date(2028, 3, 1)) == (dt.date(2028, 2, 1), 29)
    assert previous_calendar_month(dt.date(2027, 1, 15)) == (dt.date(2026, 12, 1), 31)
