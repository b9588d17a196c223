"""The device meter from raw samples (QueryPlan.reads_raw_samples) measures exactly what its
range functions measure: on the simulated pool in a real Prometheus, and on hand-made samples
at the edges (interval boundaries, NaN, infinities, changing readings)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from metering import measure, sources
from metering.models import Source
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import POOL, pool_span

STEP = 300


def plan_at(scrape: int, **fields: object) -> sources.QueryPlan:
    plan = sources.query_plan_for(Source(scrape_interval_seconds=scrape), step_seconds=STEP)
    return dataclasses.replace(plan, **fields)


def test_it_reads_raw_samples_where_an_interval_holds_at_most_five() -> None:
    assert plan_at(150).reads_raw_samples  # 2 samples an interval: fewer than 3 answers
    assert plan_at(100).reads_raw_samples  # 3
    assert plan_at(60).reads_raw_samples  # 5: a third of Prometheus' evaluation
    assert not plan_at(50).reads_raw_samples  # 6
    assert not plan_at(30).reads_raw_samples  # dcgm-exporter's default: 10
    assert not plan_at(15).reads_raw_samples
    assert plan_at(15, raw_samples=True).reads_raw_samples
    assert not plan_at(150, raw_samples=False).reads_raw_samples


def test_it_asks_for_the_frame_buffer_samples_once_for_the_three_device_parts() -> None:
    parts = sources.devices_parts(plan_at(150))
    assert {part.samples for part in parts.values()} == {
        (sources.selector(plan_at(150), "DCGM_FI_DEV_FB_USED"),)
    }
    assert [part.function for part in parts.values()] == [
        "count_over_time",
        "max_over_time",
        "avg_over_time",
    ]
    # What they mean stays readable PromQL (explain a charge, the windows' records).
    assert parts["ticks"].promql.startswith("count_over_time(DCGM_FI_DEV_FB_USED")
    assert not any(part.samples for part in sources.devices_parts(plan_at(30)).values())
    assert not any(part.samples for part in sources.busy_parts(plan_at(150)).values())


def samples_run(*values: list[list]) -> sources.QueryRun:
    at = datetime.fromtimestamp(0, UTC)
    series = [
        sources.Series(labels={"UUID": f"GPU-{index}"}, values=list(points))
        for index, points in enumerate(values)
    ]
    return sources.QueryRun("devices", "", at, at, 0.0, 0.0, series)


def test_it_puts_each_sample_in_the_interval_that_holds_it() -> None:
    first = 1_800_000_000  # a multiple of the step
    run = samples_run(
        [
            [first, "10"],  # the first instant of [first, first + 300)
            [first + 150.5, "30"],
            [first + 299.999, "20"],  # the last millisecond of it
            [first + 300, "7"],  # the next interval's first instant
            [first + 900, "5"],  # an interval without samples between
        ],
        # An interval whose only sample is its last millisecond, then the next one's first.
        [[first + 299.999, "1"], [first + 300, "2"], [first + 600.001, "3"]],
    )
    answers = measure._over_time(
        run, {"count_over_time", "max_over_time", "avg_over_time"}, first, STEP
    )
    counted, edges = answers["count_over_time"].series
    largest, _ = answers["max_over_time"].series
    mean, _ = answers["avg_over_time"].series
    assert edges.values == [[first + 300, "1"], [first + 600, "1"], [first + 900, "1"]]
    # Evaluated at each interval's end, as the range query is.
    assert counted.values == [[first + 300, "3"], [first + 600, "1"], [first + 1200, "1"]]
    assert largest.values == [[first + 300, "30"], [first + 600, "7"], [first + 1200, "5"]]
    assert mean.values == [[first + 300, "20"], [first + 600, "7"], [first + 1200, "5"]]
    assert counted.labels == {"UUID": "GPU-0"}


def test_it_takes_max_and_mean_as_prometheus_does() -> None:
    first = 1_800_000_000
    functions = {"max_over_time", "avg_over_time"}

    def answers(*texts: str) -> tuple[str, str]:
        run = samples_run([[first + 60 * index, text] for index, text in enumerate(texts)])
        taken = measure._over_time(run, functions, first, STEP)
        return (
            taken["max_over_time"].series[0].values[0][1],
            taken["avg_over_time"].series[0].values[0][1],
        )

    assert answers("4", "4", "4") == ("4", "4")
    largest, mean = answers("1", "2", "2")
    assert largest == "2" and mean.startswith("1.66666666666666")
    assert answers("NaN", "3") == ("3", "NaN")  # NaN gives way to a number in max
    assert answers("NaN", "NaN") == ("NaN", "NaN")
    assert answers("+Inf", "3") == ("+Inf", "+Inf")
    assert answers("-Inf", "3") == ("3", "-Inf")
    assert answers("+Inf", "-Inf") == ("+Inf", "NaN")
    assert answers("1.5", "2") == ("2", "1.75")


class Recording:
    """A client that records the instant queries it is sent and answers nothing."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def query_samples(self, name: str, promql: str, *, at: datetime) -> sources.QueryRun:
        self.asked.append((promql, int(at.timestamp())))
        return sources.QueryRun(name, promql, at, at, 0.0, 0.0, [])


@pytest.mark.parametrize(("closed", "width"), [(True, "3899999ms"), (False, "3900000ms")])
def test_it_selects_the_batch_and_the_interval_before_it_once(closed: bool, width: str) -> None:
    """[first, last + step), whichever end a server's ranges hold (see QueryPlan.window)."""
    first = 1_800_000_000
    client = Recording()
    plan = plan_at(150, closed_ranges=closed)
    runner = measure._Runner(client, plan, first, first + 12 * STEP)  # type: ignore[arg-type]
    runner.samples("devices", "DCGM_FI_DEV_FB_USED")
    assert client.asked == [(f"DCGM_FI_DEV_FB_USED[{width}] offset 1ms", first + 13 * STEP)]


def test_it_splits_a_long_run_into_requests_of_at_most_ten_thousand_samples_a_series() -> None:
    first = 1_800_000_000
    client = Recording()
    plan = plan_at(150)  # 2 samples an interval: 5,000 intervals a request
    runner = measure._Runner(client, plan, first, first + 7_000 * STEP)  # type: ignore[arg-type]
    runner.samples("devices", "DCGM_FI_DEV_FB_USED")
    assert [at for _, at in client.asked] == [first + 5_000 * STEP, first + 7_001 * STEP]
    assert client.asked[0][0] == "DCGM_FI_DEV_FB_USED[1499999999ms] offset 1ms"
    assert client.asked[1][0] == "DCGM_FI_DEV_FB_USED[600299999ms] offset 1ms"


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["whole pool", "two selectors a shard"])
def test_it_measures_the_pool_exactly_as_the_range_functions_do(
    pool_prometheus: PrometheusProcess, pool_truth: dict, sharded: bool
) -> None:
    """The simulated week (whole GPUs, MIG, time-slicing, both pod label spellings) in
    batches of six hours: every fact of every interval the same, the frame-buffer samples
    read once instead of three times."""
    start, end = pool_span(pool_truth)
    client = sources.PrometheusClient(url=pool_prometheus.url)
    by_samples = plan_at(POOL.scrape_interval_seconds, closed_ranges=client.ranges_closed())
    assert by_samples.reads_raw_samples  # a 60 s scrape: raw samples by default
    by_range = dataclasses.replace(by_samples, raw_samples=False)
    if sharded:  # the shard of "every other node": its series through two selectors
        by_samples = dataclasses.replace(by_samples, node_set=sources.NodeSet(None))
    plans = {"range functions": by_range, "raw samples": by_samples}
    scanned = dict.fromkeys(plans, 0)
    compared = 0
    batch = timedelta(hours=6)
    try:
        at = start
        while at < end:
            first = int(at.timestamp())
            last = int(min(at + batch, end).timestamp()) - STEP
            measured = {}
            for name, plan in plans.items():
                measured[name] = measure.measure(client, plan, first, last)
                scanned[name] += sum(
                    q["samples"] for q in measured[name].queries if q["meter"] == "devices"
                )
            assert measured["raw samples"].intervals == measured["range functions"].intervals, at
            compared += len(measured["range functions"].intervals)
            at += batch
    finally:
        client.close()
    assert compared == POOL.days * 24 * 12
    # Ticks, peak and mean each scanned the samples; raw samples are read once.
    assert scanned["raw samples"] * 2 < scanned["range functions"]
