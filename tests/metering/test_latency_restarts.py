"""A vLLM replica whose process restarted inside a window (its container killed by a liveness
probe or an OOM, or upgraded in place: a StatefulSet keeps the pod's name): its histogram
starts again from zero, and the next interval's reading is all it served since. Back-filled
into a real Prometheus with promtool, fifteen-second scrapes, twenty to a window.

- `search/vllm-qwen-0` (model `qwen`, vLLM's older e2e buckets, `le` spelled "1.0" as in the
  real sample) is degraded before the restart: each scrape 8 requests of 0.4 s and 2 of 3 s.
  It restarts at the start of the third window (the first ingested is the second) and from
  then on serves 17 requests a scrape of 0.4 s. The last reading before the restart holds
  320 under a second of 400; the first after it, 340 of 340: the bound 1 went up (320 -> 340)
  while every other went down (400 -> 340).
- `search/vllm-llama-0` (model `llama`) serves one request of 0.4 s a scrape on the older
  buckets, and is upgraded at the same moment to a vLLM with the newer ones (0.3 ... 7680);
  the new version is slower: each scrape 10 requests, every other scrape one of them 3 s.
  No bound the two versions share went down (40 -> 190 under a second, 40 -> 200 in all).
- `search/vllm-mistral-0` (model `mistral`) serves one request of 0.4 s a scrape on the newer
  buckets and is rolled back to the older ones halfway through the third window, serving 5 a
  scrape from then on. That window still reads the newer version's last values of the bounds
  the older one lacks; they are gone from the fourth.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from metering.models import IngestWindow, LatencyInterval, Service, Source
from reports import selectors
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import ingest_span
from tests.metering.jobs import backfilled_prometheus
from tests.slow import starts

pytestmark = pytest.mark.slow

SCRAPE = 15
WINDOW = timedelta(seconds=300)
# The window from LEAD_IN is not ingested: the replicas had been serving for a while.
LEAD_IN = datetime(2026, 10, 12, 8, tzinfo=UTC)
FIRST = LEAD_IN + WINDOW
RESTART = FIRST + WINDOW
END = RESTART + 2 * WINDOW
# vLLM's e2e buckets before and after they were widened (written as vLLM writes them).
OLDER = ("1.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0", "50.0", "60.0")
NEWER = (
    "0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0",
    "40.0", "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0",
)  # fmt: skip
QWEN = 'job="vllm",instance="10.244.3.7:8000",namespace="search",pod="vllm-qwen-0"'
LLAMA = 'job="vllm",instance="10.244.3.8:8000",namespace="search",pod="vllm-llama-0"'
MISTRAL = 'job="vllm",instance="10.244.3.9:8000",namespace="search",pod="vllm-mistral-0"'
ROLLBACK = RESTART + WINDOW / 2
SLO_MS = 2000


def _count(le: Decimal, fast: int, slow: int) -> int:
    return (fast if le >= Decimal("0.4") else 0) + (slow if le >= 3 else 0)


def _histogram(target: str, model: str, bounds: tuple[str, ...], fast: int, slow: int) -> list[str]:
    """vLLM's e2e histogram holding `fast` requests of 0.4 s and `slow` of 3 s."""
    labels = f'model_name="{model}",{target}'
    metric = "vllm:e2e_request_latency_seconds"
    lines = [
        f'{metric}_bucket{{le="{le}",{labels}}} {_count(Decimal(le), fast, slow)}' for le in bounds
    ]
    return [
        *lines,
        f'{metric}_bucket{{le="+Inf",{labels}}} {fast + slow}',
        f"{metric}_count{{{labels}}} {fast + slow}",
        f"{metric}_sum{{{labels}}} {Decimal(fast) * Decimal('0.4') + 3 * slow}",
    ]


def series_at() -> dict[int, list[str]]:
    """Each scrape's samples, cumulative since each process started (see the docstring)."""
    lines: dict[int, list[str]] = {}
    lead_in, restart = int(LEAD_IN.timestamp()), int(RESTART.timestamp())
    for tick in range(lead_in, int(END.timestamp()), SCRAPE):
        if tick < restart:
            n = (tick - lead_in) // SCRAPE + 1
            qwen = _histogram(QWEN, "qwen", OLDER, 8 * n, 2 * n)
            llama = _histogram(LLAMA, "llama", OLDER, n, 0)
        else:
            n = (tick - restart) // SCRAPE + 1
            qwen = _histogram(QWEN, "qwen", OLDER, 17 * n, 0)
            llama = _histogram(LLAMA, "llama", NEWER, 10 * n - n // 2, n // 2)
        rollback = int(ROLLBACK.timestamp())
        if tick < rollback:
            n = (tick - lead_in) // SCRAPE + 1
            mistral = _histogram(MISTRAL, "mistral", NEWER, n, 0)
        else:
            mistral = _histogram(
                MISTRAL, "mistral", OLDER, 5 * ((tick - rollback) // SCRAPE + 1), 0
            )
        lines[tick] = qwen + llama + mistral
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def restarted_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("restarted"), series_at(), SCRAPE)
    yield running
    running.stop()


def _ingested(url: str, service: str) -> dict[datetime, LatencyInterval]:
    source = Source.objects.create(name="restarted", url=url, scrape_interval_seconds=SCRAPE)
    ingest_span(source, FIRST, END)
    Service.objects.filter(source=source).update(slo_p99_ms=SLO_MS)
    return {
        row.interval_start: row
        for row in LatencyInterval.objects.filter(service__external_id=service)
    }


def _spelled(bounds: tuple[str, ...]) -> list[str]:
    return [format(Decimal(le).normalize(), "f") for le in bounds] + ["+Inf"]


@pytest.mark.django_db
def test_it_counts_a_restarted_replicas_histogram_from_zero_on_every_bound(
    restarted_prometheus,
) -> None:
    rows = _ingested(restarted_prometheus.url, "search/qwen")
    # The degraded window: 160 fast and 40 slow, truly above the objective.
    assert rows[FIRST].buckets[0] == ["1", 160] and rows[FIRST].request_count == 200
    # The window the restart began: 340 requests, every one under a second. Before, the
    # bound that went up (1: 320 -> 340) counted 20, each other 340: 320 requests of 3 s
    # that never were, a P99 of 4.97 s and a breach.
    restarted = rows[RESTART]
    assert restarted.buckets == [[le, 340] for le in _spelled(OLDER)]
    assert restarted.p99_seconds == Decimal("0.99")
    assert rows[RESTART + WINDOW].buckets == [[le, 340] for le in _spelled(OLDER)]
    # Nothing was said about it: a restart is no fault.
    assert not any("latency" in w for window in IngestWindow.objects.all() for w in window.warnings)


@pytest.mark.django_db
def test_it_breaches_no_interval_after_the_restart(restarted_prometheus) -> None:
    _ingested(restarted_prometheus.url, "search/qwen")
    after = selectors.service_latencies(start=RESTART, end=END, min_requests=100)
    qwen = next(s for s in after if s.service == "search/qwen")
    assert (qwen.requests, qwen.intervals, qwen.breached_intervals) == (680, 2, 0)
    assert qwen.p99_ms == Decimal("990")
    whole = selectors.service_latencies(start=FIRST, end=END, min_requests=100)
    assert next(s for s in whole if s.service == "search/qwen").breached_intervals == 1


@pytest.mark.django_db
def test_it_counts_a_replica_upgraded_in_place_to_other_buckets_from_zero(
    restarted_prometheus,
) -> None:
    rows = _ingested(restarted_prometheus.url, "search/llama")
    assert rows[FIRST].buckets == [[le, 20] for le in _spelled(OLDER)]
    # The upgraded version's first window: 200 requests, 10 of them 3 s (5 %), P99 4.5 s.
    # Before, the bounds both versions write counted 200 - 40 = 160 (150 under 2.5 s), the
    # new ones 190 and 200: buckets that fall from 200 to 160 at +Inf, 160 requests and a
    # P99 of 108 s; the two windows after the upgrade, 360 requests and a P99 of 108 s.
    upgraded = rows[RESTART]
    assert upgraded.request_count == 200
    assert upgraded.buckets == [
        [le, 0 if le == "0.3" else 190 if Decimal(le) < 3 else 200] for le in _spelled(NEWER)[:-1]
    ] + [["+Inf", 200]]
    assert upgraded.p99_seconds == Decimal("4.5")
    after = selectors.service_latencies(start=RESTART, end=END, min_requests=100)
    llama = next(s for s in after if s.service == "search/llama")
    assert (llama.requests, llama.breached_intervals) == (400, 2)
    assert llama.p99_ms == Decimal("4500")


@pytest.mark.django_db
def test_it_counts_the_window_after_a_rollback_to_fewer_buckets_once(
    restarted_prometheus,
) -> None:
    rows = _ingested(restarted_prometheus.url, "search/mistral")
    # The window after the rollback: 100 requests. Its reading lacks the newer version's
    # bounds the window before still read: not a restart, or the 50 requests the older
    # version served in the rollback's window would count again (150).
    after = rows[RESTART + WINDOW]
    assert after.buckets == [[le, 100] for le in _spelled(OLDER)]
    # The rollback's window counts only what the older version's shared bounds rose by
    # (10: no bound went down, none appeared), the limit docs/telemetry.md states.
    assert rows[RESTART].request_count == 10
