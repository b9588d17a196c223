"""A GPU exporter that Prometheus scrapes more often than the source's scrape interval says
refuses the batch, on hand-made observations: each GPU tick is taken to last the source's
interval, so more ticks would be billed as more GPU-seconds. Fewer ticks are left to
completeness, which says how many were expected. tests/metering/test_scrape_interval_pool.py
meters a real Prometheus under a wrong scrape interval."""

from __future__ import annotations

import pytest

from metering import measure, sources
from metering.measure import GpuInfo, IntervalFacts, Observation, Observed, SeriesTicks
from metering.models import Source

STEP = 300
FIRST = 1_790_000_100  # a multiple of the step
DCGM = ("dcgm-exporter", "10.42.0.11:9400")
DCGM_2 = ("dcgm-exporter", "10.42.0.12:9400")
KSM = ("kube-state-metrics", "10.42.0.5:8080")
FAST_JOB = ("dcgm-exporter-fast", "10.42.0.11:9400")


def plan(scrape_seconds: int) -> sources.QueryPlan:
    source = Source(name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=scrape_seconds)
    return sources.query_plan_for(source, step_seconds=STEP)


def observation(*scrapes: dict[tuple[str, str], int]) -> Observation:
    """One interval per mapping (the first is the one before the batch): each target scraped
    that many times, every scrape answered; the dcgm-exporter targets answer a GPU series."""
    observed: dict[int, Observed] = {}
    for n, counts in enumerate(scrapes):
        interval = observed[FIRST + (n - 1) * STEP] = Observed()
        for target, attempted in counts.items():
            interval.targets[target] = [attempted, attempted]
            if target[0] == "dcgm-exporter":
                uuid = f"GPU-{target[1]}"
                interval.series[uuid, "", "", "ml", "trainer-0"] = SeriesTicks(
                    ticks=attempted, target=target, node="gpu-a"
                )
    return Observation(observed, set(), [], 0.0)


def derive(found: Observation, scrape_seconds: int) -> measure.Measured:
    return measure.derive(found, plan(scrape_seconds), FIRST, max(found.observed))


def test_it_refuses_a_batch_whose_gpu_exporter_is_scraped_more_often() -> None:
    # Every 10 s where the source says 15 s: each interval would bill 450 GPU-seconds a GPU.
    found = observation(*[{DCGM: 30, DCGM_2: 20}] * 3)
    with pytest.raises(measure.ScrapeIntervalError) as refused:
        derive(found, scrape_seconds=15)
    assert str(refused.value) == (
        "scrape interval: Prometheus scraped 1 GPU exporter(s) more often than the source's"
        ' scrape_interval_seconds of 15 s allows, e.g. job="dcgm-exporter"'
        ' instance="10.42.0.11:9400" 30 times in the 300 s from 2026-09-21T14:15:00Z (every'
        " 10 s, where 20 scrapes were expected): set the source's scrape interval to the one"
        " Prometheus scrapes dcgm-exporter at; if two Prometheus replicas answer"
        " undeduplicated, point the source at a deduplicating querier; if the Prometheus holds"
        " two clusters whose exporters share addresses, give the source a matcher that picks"
        ' one (label_mapping.matchers, e.g. {"cluster": "..."}); nothing was stored'
    )
    assert isinstance(refused.value, sources.SourceConfigurationError)  # windows fail


def test_it_refuses_up_counted_twice_by_undeduplicated_replicas() -> None:
    found = observation({DCGM: 10}, {DCGM: 10})  # two replicas' `up`, 5 scrapes each
    with pytest.raises(measure.ScrapeIntervalError, match="10 times in the 300 s"):
        derive(found, scrape_seconds=60)


def test_it_refuses_one_tick_more_in_every_interval_of_the_batch() -> None:
    # A scrape every 150 s where the source says 300: one tick more an interval, never two,
    # but two more over the batch's two intervals than a late scrape can put there.
    found = observation({DCGM: 2}, {DCGM: 2}, {DCGM: 2})
    with pytest.raises(measure.ScrapeIntervalError, match="4 times in the 600 s"):
        derive(found, scrape_seconds=300)


def test_it_takes_a_late_scrape_for_one_tick_more_in_one_interval() -> None:
    # The tick at an interval's start scraped a little late: 21, then 19.
    found = observation({DCGM: 20}, {DCGM: 21}, {DCGM: 19}, {DCGM: 20})
    derived = derive(found, scrape_seconds=15)
    assert sorted(derived.intervals) == [FIRST, FIRST + STEP, FIRST + 2 * STEP]


def test_it_leaves_the_interval_before_the_batch_to_its_own_batch() -> None:
    # Prometheus moved from 10 s to 15 s at the batch's start: the batch is right.
    found = observation({DCGM: 30}, {DCGM: 20}, {DCGM: 20})
    assert sorted(derive(found, scrape_seconds=15).intervals) == [FIRST, FIRST + STEP]


def test_it_leaves_a_target_whose_series_another_target_answers_too() -> None:
    # A second job scrapes the exporter every 5 s: its series are counted per tick at the
    # source's 15 s, one value a tick whatever the targets (`_time_sliced_devices`).
    found = observation(*[{DCGM: 20}] * 2)
    for interval in found.observed.values():
        interval.targets[FAST_JOB] = [60, 60]
        for series in interval.series.values():
            series.also_target = FAST_JOB
    assert list(derive(found, scrape_seconds=15).intervals) == [FIRST]


def test_it_lets_jobs_without_gpus_keep_their_own_pace() -> None:
    # kube-state-metrics every 5 s, dcgm-exporter every 15 s as the source says.
    found = observation(*[{DCGM: 20, KSM: 60}] * 2)
    assert list(derive(found, scrape_seconds=15).intervals) == [FIRST]


def test_it_says_how_many_scrapes_an_incomplete_interval_expected() -> None:
    # Every 60 s where the source says 30: 5 ticks of the 10 expected, completeness says it.
    before, now = Observed(), Observed()
    for interval in (before, now):
        interval.gpus["GPU-0"] = GpuInfo(ticks=5, target=DCGM, node="gpu-a")
        interval.targets[DCGM] = [5, 5]
    facts = IntervalFacts()
    measure._derive_completeness(facts, now, before, plan(30), {})
    assert (facts.samples_seen, facts.samples_expected) == (5, 10)
    assert facts.warnings == [
        "completeness: node gpu-a (dcgm-exporter 10.42.0.11:9400) missing 1 GPU(s): GPU-0"
        " 150 s; its exporter answered 5 of 5 scrapes, 10 expected at the source's scrape"
        " interval of 30 s"
    ]
