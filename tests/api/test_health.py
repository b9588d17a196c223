"""The three health numbers, the before/after verdict and the sharing analytics.

`histogram_quantile` is checked against a real Prometheus (Debian's) evaluating the same
buckets; the endpoints are then checked against numbers computed from the fixture's records.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from decimal import Decimal

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kernel import histogram
from kernel.tasks import INTERRUPTIBLE_KINDS
from reports import health, selectors
from tests import factories as f
from tests.api import expected
from tests.pools.api import END, SERVICES, START, TASKS, ZONE
from tests.slow import starts

RANGE = {"start": START.isoformat(), "end": END.isoformat()}

# --- histogram_quantile against Prometheus ----------------------------------------------

HISTOGRAMS = [
    [("0.1", 50), ("0.25", 90), ("0.5", 98), ("1", 100), ("+Inf", 100)],  # in a middle bucket
    [("0.1", 995), ("0.25", 999), ("+Inf", 1000)],  # rank in the first bucket
    [("0.05", 3), ("0.1", 5), ("+Inf", 100)],  # rank in +Inf: upper bound of the last finite
    [("0.1", 0), ("0.5", 0), ("+Inf", 0)],  # no requests: NaN
    [("0.05", 7), ("0.1", 5), ("0.25", 13), ("+Inf", 13)],  # non-monotonic, repaired
    [("0.005", 1), ("0.01", 2), ("2.5", 40), ("10", 41), ("+Inf", 41)],
    [("0.1", 99), ("0.2", 100), ("+Inf", 100)],  # rank exactly on a bucket's count
    [("0", 5), ("1", 10), ("+Inf", 10)],
    [("-1", 100), ("+Inf", 100)],  # first bound not above zero: that bound
    [("+Inf", 10)],  # one bucket only: NaN
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
@starts("Prometheus")
def prometheus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prometheus")
    (folder / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def prometheus_quantile(url: str, buckets: list[tuple[str, int]]) -> str:
    series = " or ".join(
        f'label_replace(vector({count}), "le", "{le}", "", "")' for le, count in buckets
    )
    query = urllib.parse.urlencode({"query": f"histogram_quantile(0.99, {series})"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        result = json.load(answer)["data"]["result"]
    return result[0]["value"][1]


@pytest.mark.slow
@pytest.mark.parametrize("buckets", HISTOGRAMS)
def test_it_computes_p99_as_prometheus_does(prometheus, buckets):
    ours = histogram.histogram_quantile(histogram.P99, histogram.parse_histogram(buckets))
    theirs = prometheus_quantile(prometheus, buckets)
    if theirs == "NaN":
        assert ours is None
    else:
        assert ours is not None
        assert abs(ours - Decimal(theirs)) <= Decimal("1e-12") * max(1, abs(ours))


def test_it_merges_buckets_rather_than_averaging_p99s():
    quiet = [("0.1", 100), ("1", 100), ("+Inf", 100)]
    busy = [("0.1", 500), ("1", 1000), ("+Inf", 1000)]
    merged = histogram.merge_histograms([quiet, busy])
    assert merged == histogram.parse_histogram([("0.1", 600), ("1", 1100), ("+Inf", 1100)])
    # rank 1089 of 1100 falls in (0.1, 1]: 0.1 + 0.9 * 489/500
    assert histogram.histogram_quantile(histogram.P99, merged) == Decimal("0.9802")


def test_it_keeps_only_bounds_every_interval_has():
    old = [("0.1", 5), ("0.5", 8), ("+Inf", 10)]
    new = [("0.1", 1), ("0.25", 2), ("+Inf", 4)]
    assert histogram.merge_histograms([old, new]) == histogram.parse_histogram(
        [("0.1", 6), ("+Inf", 14)]
    )


# --- The endpoint -----------------------------------------------------------------------


def expected_services(api_pool, teams: set[str] | None = None) -> list[dict]:
    rows = []
    for name, (team, slo, is_key) in sorted(SERVICES.items()):
        if not is_key or (teams is not None and team not in teams):
            continue
        intervals = [
            histogram.parse_histogram(b) for i, b in api_pool.latency[name] if expected.in_range(i)
        ]
        merged: dict[Decimal, Decimal] = defaultdict(Decimal)
        for buckets in intervals:
            for le, count in buckets:
                merged[le] += count
        p99 = histogram.histogram_quantile(histogram.P99, sorted(merged.items())) * 1000
        breaches = 0
        for buckets in intervals:
            q = histogram.histogram_quantile(histogram.P99, buckets)
            breaches += buckets[-1][1] >= 100 and q is not None and q * 1000 > slo
        rows.append(
            {
                "service": name,
                "team": team,
                "slo_p99_ms": slo,
                "p99_ms": expected.places(p99, 3),
                "meets_slo": p99 <= slo,
                "requests": expected.places(merged[histogram.INFINITY], 0),
                "intervals": len(intervals),
                "breached_intervals": breaches,
            }
        )
    return rows


def expected_waits(api_pool, teams: set[str] | None = None) -> tuple[dict, list]:
    per_kind = defaultdict(list)
    for task, scheduled, seconds in api_pool.waits:
        if expected.in_range(scheduled) and (teams is None or api_pool.team_of(task) in teams):
            per_kind[api_pool.kind_of(task)].append(seconds)
    every = [s for waits in per_kind.values() for s in waits]
    overall = {
        "waits": len(every),
        "mean_seconds": expected.places(Decimal(sum(every)) / len(every), 3),
        "gave_up": 0,  # every pod of this pool was scheduled
    }
    kinds = []
    for kind, waits in sorted(per_kind.items()):
        mean = expected.places(Decimal(sum(waits)) / len(waits), 3)
        kinds.append(
            {
                "kind": kind,
                "waits": len(waits),
                "mean_seconds": mean,
                "gave_up": 0,
                "scheduling_mean_seconds": mean,  # no Kueue in this pool
                "admitted_workloads": 0,
                "admission_mean_seconds": None,
            }
        )
    return overall, kinds


def test_it_gives_the_three_numbers_the_records_give(api_pool, callers):
    body = callers["platform"].client.get(reverse("api-health"), RANGE).json()
    busy = sum(u.busy for u in api_pool.usage if expected.in_range(u.interval))
    capacity = sum(c for i, c in api_pool.capacity.items() if expected.in_range(i))
    assert body["utilization"]["effective"] == expected.places(busy / capacity, 6)
    assert body["utilization"]["busy_gpu_hours"] == expected.hours(busy)
    assert body["utilization"]["capacity_gpu_hours"] == expected.hours(capacity)
    assert body["services"] == expected_services(api_pool)
    assert any(s["breached_intervals"] for s in body["services"])  # the fixture has breaches
    assert {s["meets_slo"] for s in body["services"]} == {True, False}
    overall, kinds = expected_waits(api_pool)
    assert body["wait_overall"] == overall
    assert body["wait_per_kind"] == kinds
    assert (body["scope"], body["before"], body["verdict"]) == ("all", None, None)


def test_it_shows_a_team_lead_their_services_and_waits(api_pool, callers):
    body = callers["lead_a"].client.get(reverse("api-health"), RANGE).json()
    assert body["scope"] == "own"
    assert body["services"] == expected_services(api_pool, teams={"alpha"})
    overall, kinds = expected_waits(api_pool, teams={"alpha"})
    assert (body["wait_overall"], body["wait_per_kind"]) == (overall, kinds)


def test_it_compares_two_periods_into_a_verdict(api_pool, callers):
    query = {
        **RANGE,
        "before_start": START.isoformat(),
        "before_end": END.isoformat(),
    }
    body = callers["finance"].client.get(reverse("api-health"), query).json()
    # The same period twice: nothing moved.
    assert body["verdict"]["code"] == "not_complementary"
    assert body["before"]["services"] == body["services"]


def numbers(utilization: str, p99: str | None, wait: str) -> health.HealthNumbers:
    service = health.ServiceLatency(
        service_id=1,
        service="s",
        team="t",
        slo_p99_ms=500,
        p99_ms=None if p99 is None else Decimal(p99),
        requests=Decimal(1000),
        intervals=1,
        breached_intervals=0,
    )
    return health.HealthNumbers(
        utilization=health.Utilization(Decimal(utilization), Decimal(1)),
        services=[service],
        waits=health.Waits({"training_batch": health.MeanWait(1, Decimal(wait))}),
    )


@pytest.mark.parametrize(
    ("before", "after", "code"),
    [
        (("0.50", "400", "100"), ("0.60", "350", "80"), "sharing_works"),
        (("0.50", "400", "100"), ("0.60", "450", "80"), "isolation_insufficient"),
        (("0.50", "400", "100"), ("0.60", "450", "120"), "isolation_insufficient"),
        (("0.50", "400", "100"), ("0.51", "410", "105"), "not_complementary"),
        (("0.50", "400", "100"), ("0.50", "400", "100"), "not_complementary"),
        (("0.50", "400", "100"), ("0.60", "400", "80"), "mixed"),
        (("0.50", "400", "100"), ("0.40", "300", "50"), "mixed"),
        (("0", "400", "100"), ("0.60", None, "80"), "mixed"),
    ],
)
def test_it_reads_a_before_after_pair_into_a_verdict(before, after, code):
    assert health.verdict(numbers(*before), numbers(*after)).code == code


def test_it_calls_a_period_without_capacity_insufficient_data():
    empty = health.HealthNumbers(health.Utilization(Decimal(0), Decimal(0)), [], health.Waits({}))
    assert health.verdict(empty, numbers("0.5", "1", "1")).code == "insufficient_data"


# --- Sharing analytics ------------------------------------------------------------------


def test_it_profiles_training_against_inference_by_local_hour(api_pool, callers):
    body = callers["platform"].client.get(reverse("api-sharing"), RANGE).json()
    training, inference, capacity = defaultdict(Decimal), defaultdict(Decimal), defaultdict(Decimal)
    for u in api_pool.usage:
        if expected.in_range(u.interval):
            hour = u.interval.astimezone(ZONE).hour
            (inference if api_pool.kind_of(u.task) == "inference" else training)[hour] += u.alloc
    for interval, gpu_seconds in api_pool.capacity.items():
        if expected.in_range(interval):
            capacity[interval.astimezone(ZONE).hour] += gpu_seconds
    profile = {row["hour"]: row for row in body["profile"]}
    assert sorted(profile) == list(range(24))
    for hour in range(24):
        if not capacity[hour]:
            assert profile[hour]["training_share"] is None
            continue
        assert profile[hour]["training_share"] == expected.places(
            training[hour] / capacity[hour], 6
        )
        assert profile[hour]["inference_share"] == expected.places(
            inference[hour] / capacity[hour], 6
        )
    hours = sorted(h for h in capacity if capacity[h])
    r = statistics.correlation(
        [float(training[h] / capacity[h]) for h in hours],
        [float(inference[h] / capacity[h]) for h in hours],
    )
    assert abs(Decimal(body["correlation"]) - Decimal(r)) < Decimal("0.000001")
    assert Decimal(body["correlation"]) < 0  # the fixture's loads are complementary


def test_it_gives_the_interruptible_share_and_preemption_cost(api_pool, callers):
    body = callers["finance"].client.get(reverse("api-sharing"), RANGE).json()
    in_range = [u for u in api_pool.usage if expected.in_range(u.interval)]
    interruptible = sum(u.alloc for u in in_range if TASKS[u.task][1] in INTERRUPTIBLE_KINDS)
    share = interruptible / sum(u.alloc for u in in_range)
    assert body["interruptible_share"] == expected.places(share, 6)
    assert body["time_slicing_pays_off"] is (share >= Decimal("0.5"))
    lost = defaultdict(Decimal)
    for task, at, gpus, since_start, reported in api_pool.preemptions:
        if expected.in_range(at):
            lost[api_pool.team_of(task)] += expected.lost(gpus, since_start, reported)
    assert body["lost_gpu_hours_per_team"] == {t: expected.hours(s) for t, s in lost.items()}
    # min(1800, 5000) * 2 + 1200.5 + min(1800, 900) * 2 + 100 * 0.5, in GPU-hours
    assert body["lost_gpu_hours_per_team"]["bravo"] == "1.85"


def test_it_shows_a_team_lead_only_their_preemption_cost(api_pool, callers):
    body = callers["lead_a"].client.get(reverse("api-sharing"), RANGE).json()
    assert body["lost_gpu_hours_per_team"] == {"alpha": expected.hours(Decimal(500))}


# --- The fast paths give the exact answers ----------------------------------------------

BOUNDS_POOL = ["0.005", "0.01", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10"]


@st.composite
def stored_histograms(draw) -> list[list]:
    """Buckets as metering stores them: any subset of bounds, +Inf last (or shuffled), whole
    or fractional counts, sometimes non-monotonic."""
    bounds = sorted(draw(st.sets(st.sampled_from(BOUNDS_POOL), max_size=6)), key=Decimal)
    fractional = draw(st.booleans())
    count, pairs = 0, []
    for le in [*bounds, "+Inf"]:
        count += draw(st.integers(min_value=-2, max_value=80))
        count = max(count, 0)
        pairs.append([le, count + 0.5 if fractional else count])
    if draw(st.booleans()):
        pairs = draw(st.permutations(pairs))
    return pairs


@given(st.lists(stored_histograms(), min_size=1, max_size=8))
@hypothesis_settings(max_examples=200, deadline=None)
def test_it_merges_stored_buckets_as_summing_each_bound_would(histograms):
    common = set.intersection(
        *({histogram.parse_histogram([p])[0][0] for p in h} for h in histograms)
    )
    naive: dict[Decimal, Decimal] = defaultdict(Decimal)
    for stored in histograms:
        for le, count in histogram.parse_histogram(stored):
            if le in common:
                naive[le] += count
    assert histogram.merge_histograms(histograms) == tuple(sorted(naive.items()))


@given(
    histograms=st.lists(stored_histograms(), min_size=1, max_size=6),
    slo=st.sampled_from([5, 50, 100, 250, 1000, 2500]),
    minimum=st.sampled_from([0, 1, 50, 100]),
)
@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_it_reads_stored_histograms_into_the_same_service_numbers(db, histograms, slo, minimum):
    service = f.ServiceFactory(slo_p99_ms=slo)
    for n, buckets in enumerate(histograms):
        f.LatencyIntervalFactory(
            service=service, interval_start=START + n * dt.timedelta(minutes=5), buckets=buckets
        )
    [got] = [
        s
        for s in selectors.service_latencies(start=START, end=END, min_requests=minimum)
        if s.service_id == service.pk
    ]
    merged = histogram.merge_histograms(histograms)
    p99 = histogram.histogram_quantile(histogram.P99, merged)
    breached = sum(
        histogram.interval_breached(
            histogram.parse_histogram(b), slo_p99_ms=Decimal(slo), min_requests=minimum
        )
        for b in histograms
    )
    wanted = health.ServiceLatency(
        service_id=service.pk,
        service=service.external_id,
        team=service.team.name,
        slo_p99_ms=slo,
        p99_ms=None if p99 is None else p99 * 1000,
        requests=merged[-1][1] if merged else Decimal(0),
        intervals=len(histograms),
        breached_intervals=breached,
    )
    assert got == wanted
