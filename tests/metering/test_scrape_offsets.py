"""Samples stored between the ticks, as Prometheus stores them: each scrape target is scraped
at an offset of its own within the scrape interval, so its samples never fall on the
multiples of the interval that a subquery's points fall on. The simulator writes them so
with `scrape_offsets` (each target 1 s to one interval after its tick); the truth is the same.

On the code before (e7fd829), the per-tick view of time-sliced GPUs read at each point the
sample before it, one tick late: over these two days at 60 s, 29 task intervals' allocation
(and their busy time) moved a tick into the interval after, the totals unchanged, across
interval boundaries and so across peak hours' and months'; and each preemption was dated a
tick late. Now a point reads the sample of its own tick (`QueryPlan.tick_slot`), at 60 s and
at 150 s (raw samples) alike, and every row equals the one metered from samples on the
ticks, except where a pod is first seen: identity is read at each interval's end, and a
sample exactly there (on the tick) is the next interval's, so the grid copy sees a pod one
interval sooner (a task's `first_seen`, which window writes its wait).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import date, datetime
from decimal import Decimal

import pytest
import requests

from metering.models import Source, UsageInterval
from simulator.config import PoolConfig
from simulator.pool import simulate
from simulator.prometheus import PrometheusProcess, backfill
from tests.metering.conftest import ingest_span, pool_span, prometheus_over, source_remove
from tests.metering.stored import stored
from tests.slow import starts

pytestmark = pytest.mark.slow

# Two days of the conftest's pool (MIG, time-slicing, both label spellings, preemptions),
# scraped every 60 s (Prometheus' range functions) and every 150 s (raw samples, read once).
DAYS = PoolConfig(gpus=8, days=2, start=date(2026, 9, 28), seed=11)
# What the grid copy sees a pod sooner in (see the module docstring).
FIRST_VIEW = {"tasks", "windows"}
ISO = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture(scope="module", params=[60, 150], ids=["60s", "150s"])
@starts("Prometheus")
def pools(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    on_ticks = replace(DAYS, scrape_interval_seconds=request.param)
    running: dict = {"scrape": request.param}
    try:
        for name, config in (
            ("on_ticks", on_ticks),
            ("between", replace(on_ticks, scrape_offsets=True)),
        ):
            out = tmp_path_factory.mktemp(name)
            simulate(config, out)
            backfill(out / "metrics.om", out / "tsdb")
            (out / "metrics.om").unlink()
            running[name] = prometheus_over(out / "tsdb", config.scrape_interval_seconds)
            running[f"{name}_truth"] = json.loads((out / "truth.json").read_text())
        yield running
    finally:
        for process in running.values():
            if isinstance(process, PrometheusProcess):
                process.stop()


@pytest.fixture(scope="module")
def metered(
    pools: dict, django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[dict[str, dict[str, list[tuple]]]]:
    """Both copies ingested once (committed), removed again when the module is done."""
    with django_db_blocker.unblock():
        found, ids = {}, []
        for name in ("on_ticks", "between"):
            source = Source.objects.create(
                name=name, url=pools[name].url, scrape_interval_seconds=pools["scrape"]
            )
            ids.append(source.pk)
            ingest_span(source, *pool_span(pools[f"{name}_truth"]))
            found[name] = stored(source.pk)
        yield found
        for pk in ids:
            source_remove(pk)


def test_it_writes_each_targets_samples_between_the_ticks(pools) -> None:
    """The condition is there: every target's samples are off the scrape interval's grid."""
    at = datetime.fromisoformat("2026-09-28T06:00:00+00:00").timestamp()
    answer = requests.post(
        f"{pools['between'].url}/api/v1/query",
        data={"query": "timestamp(up) or timestamp(kube_pod_info)", "time": at},
        timeout=30,
    ).json()
    scrape = pools["scrape"]
    stamps = [Decimal(series["value"][1]) for series in answer["data"]["result"]]
    assert stamps and all(stamp % scrape for stamp in stamps)
    assert len({stamp % scrape for stamp in stamps}) > 1  # targets at offsets of their own


def test_it_stores_what_samples_on_the_ticks_give(metered) -> None:
    on_ticks, between = metered["on_ticks"], metered["between"]
    assert len(on_ticks["usage"]) > 1000 and on_ticks["preemptions"]
    assert {name: rows for name, rows in between.items() if name not in FIRST_VIEW} == {
        name: rows for name, rows in on_ticks.items() if name not in FIRST_VIEW
    }


@pytest.mark.django_db
@pytest.mark.parametrize("meter", ["alloc_gpu_seconds", "busy_gpu_seconds"])
def test_it_stores_every_tasks_gpu_seconds_exactly(metered, pools, meter) -> None:
    found = {
        (task, start.strftime(ISO)): amount
        for task, start, amount in UsageInterval.objects.filter(
            task__source__name="between"
        ).values_list("task__external_id", "interval_start", meter)
        if amount
    }
    expected = {
        (task_id, interval): Decimal(str(amount))
        for task_id, task in pools["between_truth"]["tasks"].items()
        for interval, amount in task[meter].items()
        if amount
    }
    assert len(expected) > 1000 and found == expected
