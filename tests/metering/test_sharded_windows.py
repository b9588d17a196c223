"""Sharded windows (metering.shards): a source whose windows are measured in shards by node
set, on a real Prometheus back-filled from the simulated pool, stores exactly what the same
source stores unsharded, row for row, and the simulator's truth.

The pool has two nodes, one labelled `Hostname` and one `hostname`, with pods spelled `pod`
on one and `exported_pod` on the other, and multi-node training Jobs (a pod on each node at
once); the shards are the two nodes and a shard of the rest (no GPU node: it reads the
pool-wide pod meters), so every task that ran on both nodes has pods in two shards.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest
from django.core.management import call_command

from metering import measure, services, shards, sources
from metering.models import (
    CapacityInterval,
    IngestBatch,
    IngestShard,
    IngestWindow,
    Source,
    UsageInterval,
)
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import (
    ingest_span,
    prometheus_over,
    simulated,
    source_remove,
    wait_for,
    windows_status,
)
from tests.metering.stored import stored
from tests.slow import starts

pytestmark = pytest.mark.slow  # every test here starts Prometheus (tests/slow.py)

ISO = "%Y-%m-%dT%H:%M:%SZ"
POOL = PoolConfig(
    gpus=8, days=3, start=date(2026, 9, 29), seed=3, scrape_interval_seconds=60, gang_jobs=3
)
# Two days across the October month boundary of Asia/Shanghai, with preemptions.
SPAN = (datetime(2026, 9, 29, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC))
BATCH = 48  # windows per range query, as the pool tests ingest
NODE_PATTERNS = ["gpu-node-01", "gpu-node-02"]


@pytest.fixture(scope="module")
def gang_pool(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("gang-pool")
    return simulated(POOL, out), out / "tsdb"


@pytest.fixture(scope="module")
def gang_truth(gang_pool: tuple[dict, Path]) -> dict:
    return gang_pool[0]


@pytest.fixture(scope="module")
@starts("Prometheus")
def gang_prometheus(gang_pool: tuple[dict, Path]) -> Iterator[PrometheusProcess]:
    running = prometheus_over(gang_pool[1], POOL.scrape_interval_seconds)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def both_sources(
    django_db_setup: None,
    django_db_blocker: pytest.FixtureRequest,
    gang_prometheus: PrometheusProcess,
) -> Iterator[tuple[int, int]]:
    """The span ingested twice (committed): unsharded, and in shards by node."""
    with django_db_blocker.unblock():
        whole = Source.objects.create(
            name="whole", url=gang_prometheus.url, scrape_interval_seconds=60
        )
        sharded = Source.objects.create(
            name="sharded",
            url=gang_prometheus.url,
            scrape_interval_seconds=60,
            shard_node_patterns=NODE_PATTERNS,
        )
        ingest_span(whole, *SPAN, batch=BATCH)
        ingest_span(sharded, *SPAN, batch=BATCH)
        yield whole.pk, sharded.pk
        for pk in (whole.pk, sharded.pk):
            source_remove(pk)


def truth_alloc(truth: dict, start: datetime, end: datetime) -> dict[tuple[str, str], Decimal]:
    first, last = start.strftime(ISO), end.strftime(ISO)
    return {
        (task_id, interval): Decimal(str(amount))
        for task_id, task in truth["tasks"].items()
        for interval, amount in task["alloc_gpu_seconds"].items()
        if first <= interval < last
    }


def stored_alloc(source_id: int) -> dict[tuple[str, str], Decimal]:
    return {
        (task, moment.strftime(ISO)): amount
        for task, moment, amount in UsageInterval.objects.filter(
            task__source_id=source_id, alloc_gpu_seconds__gt=0
        ).values_list("task__external_id", "interval_start", "alloc_gpu_seconds")
    }


def pods_per_node(prometheus: PrometheusProcess, start: datetime, end: datetime) -> dict:
    """(namespace, pod) -> the nodes its GPU series named in [start, end), from Prometheus."""
    client = sources.PrometheusClient(url=prometheus.url)
    seconds = int((end - start).total_seconds())
    try:
        result = client.query_range(
            "pods",
            f"count_over_time(DCGM_FI_DEV_FB_USED[{seconds}s])",
            start=end,
            end=end,
            step_seconds=seconds,
        )
    finally:
        client.close()
    nodes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for series in result.series:
        labels = series.labels
        pod = (
            labels.get("exported_namespace") or labels.get("namespace", ""),
            labels.get("exported_pod") or labels.get("pod", ""),
        )
        if pod[1]:
            nodes[pod].add(labels.get("Hostname") or labels.get("hostname", ""))
    return nodes


@pytest.mark.django_db
def test_it_stores_with_shards_exactly_what_it_stores_without(both_sources, gang_truth) -> None:
    whole, sharded = (stored(pk) for pk in both_sources)
    assert whole["usage"] and whole["capacity"] and whole["latency"]
    assert whole["preemptions"] and whole["waits"], "the span should preempt and wait"
    for table in whole:
        assert sharded[table] == whole[table], table
    assert stored_alloc(both_sources[1]) == truth_alloc(gang_truth, *SPAN)
    assert not IngestBatch.objects.exists() and not IngestShard.objects.exists()


def asked(source_id: int) -> list[tuple[str, str, object]]:
    """(meter, PromQL, who asked it) of every query a source's windows were measured with,
    each run's once."""
    runs = {
        window.measured_with_id or window.pk: window.recorded_queries
        for window in IngestWindow.objects.filter(source_id=source_id).select_related(
            "measured_with"
        )
    }
    return sorted(
        (query["meter"], query["promql"], query.get("shard", ""))
        for queries in runs.values()
        for query in queries
    )


@pytest.mark.django_db
def test_it_asks_each_query_once_with_the_follow_ups_from_the_combiner(both_sources) -> None:
    """Device meters by the shard of their nodes; the pool-wide meters and the narrowed
    follow-ups by the combiner alone, the very follow-ups an unsharded ingest asks."""
    whole, sharded = (asked(pk) for pk in both_sources)
    askers: dict[str, set[object]] = defaultdict(set)
    for meter, _, shard in sharded:
        askers[meter].add(shard)
    assert askers.pop("devices") == askers.pop("busy") == {0, 1, 2}
    assert set(askers) >= {*sources.POD_METERS, "pod_history", "pod_details", "preemption_ticks"}
    assert all(shard == {"combiner"} for shard in askers.values()), askers
    follow_ups = [(meter, promql) for meter, promql, _ in whole if meter in askers]
    assert follow_ups == [(meter, promql) for meter, promql, shard in sharded if meter in askers]


@pytest.mark.django_db
def test_it_splits_tasks_across_shards_in_one_batch(
    both_sources, gang_prometheus, gang_truth
) -> None:
    """The comparison above covers tasks whose pods sat in two shards of one batch: the
    inference services' replicas and the multi-node training Jobs."""
    task_of = {
        (task["namespace"], pod): task_id
        for task_id, task in gang_truth["tasks"].items()
        for pod in task["pods"]
    }
    split: dict[str, set[str]] = defaultdict(set)  # task -> kinds of batches it spanned
    start = SPAN[0]
    while start < SPAN[1]:
        end = start + timedelta(seconds=BATCH * 300)
        nodes: dict[str, set[str]] = defaultdict(set)
        for pod, names in pods_per_node(gang_prometheus, start, end).items():
            nodes[task_of[pod]] |= names
        for task_id, names in nodes.items():
            if len(names) > 1:
                split[gang_truth["tasks"][task_id]["kind"]].add(task_id)
        start = end
    assert split.get("inference"), split
    assert split.get("training_batch") or split.get("training_interactive"), split


@pytest.mark.django_db
def test_it_changes_nothing_when_a_sharded_window_runs_again(both_sources) -> None:
    sharded = Source.objects.get(pk=both_sources[1])
    before = stored(sharded.pk)
    hashes = dict(IngestWindow.objects.filter(source=sharded).values_list("start", "content_hash"))
    ingest_span(sharded, SPAN[0], SPAN[0] + timedelta(hours=8), batch=BATCH)
    assert stored(sharded.pk) == before
    again = IngestWindow.objects.filter(source=sharded)
    assert dict(again.values_list("start", "content_hash")) == hashes
    assert not again.filter(changed_after_first_write__isnull=False).exists()
    assert not IngestBatch.objects.exists()


def test_it_round_trips_an_observation_exactly(gang_prometheus) -> None:
    """What a shard stages reads back identical: Decimals as written, Fractions as num/den."""
    plan = sources.query_plan_for(Source(scrape_interval_seconds=60), step_seconds=300)
    plan = shards.shard_plans(NODE_PATTERNS, plan)[1]
    client = sources.PrometheusClient(url=gang_prometheus.url)
    try:
        first = int(datetime(2026, 9, 30, 12, tzinfo=UTC).timestamp())
        observation = measure.observe(client, plan, first, first + 11 * 300)
    finally:
        client.close()
    staged = shards.observation_dump(observation)
    loaded = shards.observation_load(memoryview(staged))  # as the database hands it back
    assert loaded == observation
    kinds = {type(s.busy) for i in observation.observed.values() for s in i.series.values()}
    assert Decimal in kinds  # exact values, not floats, went through
    assert kinds <= {Decimal, Fraction, type(None)}


EMPTY_OBSERVATION = measure.Observation(
    observed={0: measure.Observed()}, shared=set(), queries=[], evaluation_seconds=0.0
)
STAGED = shards.observation_dump(EMPTY_OBSERVATION)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"version":1,"intervals":[]}', id="version 1, JSON text"),
        pytest.param(
            STAGED.replace(shards.STAGED_HEADER, b"tandem observation 2\n"),
            id="version 2, with the follow-ups' answers",
        ),
        pytest.param(STAGED[: len(STAGED) // 2], id="cut short"),
        pytest.param(shards.STAGED_HEADER + pickle.dumps({}, protocol=5), id="not an observation"),
        # A class no observation holds is not even imported, let alone called.
        pytest.param(
            shards.STAGED_HEADER + pickle.dumps(subprocess.Popen, protocol=5), id="another class"
        ),
    ],
)
def test_it_refuses_a_staged_observation_of_another_version_or_shape(data: bytes) -> None:
    """A row staged by another version, cut short, or holding anything but an observation is
    refused with the reason (the combiner then starts the batch again), never run."""
    assert shards.observation_load(STAGED) == EMPTY_OBSERVATION
    with pytest.raises(shards.StagedFormatError):
        shards.observation_load(data)


@pytest.mark.django_db(transaction=True)
def test_it_leaves_nothing_partial_when_a_shard_fails_and_completes_on_retry(
    gang_prometheus, gang_truth, settings
) -> None:
    """A shard whose Prometheus is unreachable half-way through the batch (one shard staged,
    the next failing) leaves the windows pending and no rows; its retry completes the batch.
    A combiner whose Prometheus is unreachable (it asks the pool-wide meters and the
    follow-ups), or that dies inside its transaction, writes nothing and keeps the staged
    shards until it runs again."""
    settings.TANDEM_INGEST_BATCH_WINDOWS = 24  # the two hours in one batch: one set of shards
    source = Source.objects.create(
        name="flaky",
        url=gang_prometheus.url,
        scrape_interval_seconds=60,
        shard_node_patterns=NODE_PATTERNS,
    )
    start = datetime(2026, 9, 30, 15, tzinfo=UTC)
    end = start + timedelta(hours=2)
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]
    queued: list[int] = []
    services.windows_ingest(window_ids=ids, shard_dispatch=queued.extend)
    assert len(queued) == 3 and windows_status(ids) == {"running": 24}
    assert services.shard_ingest(shard_id=queued[0]) is None  # staged, others still to go
    Source.objects.filter(pk=source.pk).update(url="http://127.0.0.1:9")  # nothing listens
    with pytest.raises(sources.PrometheusUnavailable):
        services.shard_ingest(shard_id=queued[1])
    assert windows_status(ids) == {"pending": 24}
    assert not UsageInterval.objects.filter(task__source=source).exists()
    assert not CapacityInterval.objects.filter(source=source).exists()
    Source.objects.filter(pk=source.pk).update(url=gang_prometheus.url)
    assert services.shard_ingest(shard_id=queued[1]) is None
    batch_id = services.shard_ingest(shard_id=queued[2])
    assert batch_id is not None  # the last shard staged: the combiner's turn
    Source.objects.filter(pk=source.pk).update(url="http://127.0.0.1:9")
    with pytest.raises(sources.PrometheusUnavailable):
        services.shards_combine(batch_id=batch_id)
    assert windows_status(ids) == {"pending": 24}
    assert not UsageInterval.objects.filter(task__source=source).exists()
    Source.objects.filter(pk=source.pk).update(url=gang_prometheus.url)

    class Killed(Exception):
        pass

    def write_then_die(*args, **kwargs):
        real_write(*args, **kwargs)
        raise Killed

    real_write = shards._run_write
    shards._run_write = write_then_die
    try:
        with pytest.raises(Killed):
            services.shards_combine(batch_id=batch_id)
    finally:
        shards._run_write = real_write
    assert not UsageInterval.objects.filter(task__source=source).exists()
    assert IngestShard.objects.filter(batch_id=batch_id, status="staged").count() == 3
    services.shards_combine(batch_id=batch_id)
    assert windows_status(ids) == {"done": 24}
    assert stored_alloc(source.pk) == truth_alloc(gang_truth, start, end)
    assert not IngestBatch.objects.exists()
    with pytest.raises(IngestBatch.DoesNotExist):  # a redelivered combiner: nothing left
        services.shards_combine(batch_id=batch_id)


@pytest.mark.django_db(transaction=True)
def test_it_replaces_the_staged_shards_of_an_attempt_started_again(gang_prometheus) -> None:
    source = Source.objects.create(
        name="restarted",
        url=gang_prometheus.url,
        scrape_interval_seconds=60,
        shard_node_patterns=NODE_PATTERNS,
    )
    start = datetime(2026, 9, 30, 15, tzinfo=UTC)
    ids = [
        w.pk
        for w in services.windows_create(source=source, start=start, end=start + timedelta(hours=1))
    ]
    first: list[int] = []
    services.windows_ingest(window_ids=ids, shard_dispatch=first.extend)
    services.shard_ingest(shard_id=first[0])
    again: list[int] = []
    services.windows_ingest(window_ids=ids, shard_dispatch=again.extend)
    assert IngestBatch.objects.count() == 1 and not set(first) & set(again)
    with pytest.raises(IngestShard.DoesNotExist):  # the old attempt's shard: nothing to do
        services.shard_ingest(shard_id=first[1])
    assert not IngestShard.objects.filter(status="staged").exists()


@pytest.mark.django_db(transaction=True)
def test_it_runs_shards_and_the_combiner_as_tasks_and_survives_a_killed_worker(
    start_worker, gang_prometheus, gang_truth, test_database_url, tmp_path
) -> None:
    """Through real Celery workers: each shard is a task and the combiner another. A worker
    killed while a shard stages leaves no usage rows; the redelivered shard completes it."""
    from metering import tasks

    source = Source.objects.create(
        name="celery-shards",
        url=gang_prometheus.url,
        scrape_interval_seconds=60,
        shard_node_patterns=NODE_PATTERNS,
    )
    start = datetime(2026, 9, 30, 23, tzinfo=UTC)
    end = start + timedelta(hours=1)
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]
    blocker = psycopg.connect(test_database_url)
    watcher = psycopg.connect(test_database_url, autocommit=True)
    waiting = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND query ILIKE '%%metering_ingestbatch%%'"
    )
    # The run's task body here (`apply`): it starts the batch and queues its shards. The batch
    # row is held before any worker runs, so the first shard to stage waits inside its
    # transaction. Catching the row between a worker's start and the combiner's delete
    # failed once shards took tens of milliseconds on this small pool.
    assert tasks.ingest_windows.apply(args=[ids]).get() == ["running"] * 12
    assert blocker.execute("SELECT 1 FROM metering_ingestbatch FOR UPDATE").fetchone()
    worker = start_worker()
    try:
        wait_for(
            lambda: watcher.execute(waiting).fetchone() is not None,
            timeout=60,
            what="a shard to block while staging",
        )
        worker.kill()
    finally:
        blocker.rollback()
        blocker.close()
    watcher.close()
    assert not UsageInterval.objects.filter(task__source=source).exists()
    assert windows_status(ids) == {"running": 12}
    # The killed shard's message was never acknowledged. A worker gives back such messages
    # once they are older than the broker's visibility timeout (3 s in worker_settings) when
    # it starts, then only every 100 s (kombu's Redis transport restores on every tenth of
    # its 10-second polls): a worker started sooner would wait those 100 s.
    time.sleep(4)
    second = start_worker()
    wait_for(lambda: windows_status(ids) == {"done": 12}, timeout=60, what="12 windows done")
    assert stored_alloc(source.pk) == truth_alloc(gang_truth, start, end)
    assert not IngestBatch.objects.exists()
    log = (tmp_path / "worker-0.log").read_text() + second.log_path.read_text()
    assert "metering.tasks.ingest_shard" in log
    assert "metering.tasks.ingest_shards_combine" in log
    assert log.count("Task metering.tasks.ingest_shards_combine[") >= 1


@pytest.mark.django_db(transaction=True)
def test_it_ingests_a_sharded_source_from_the_command_in_shards_or_not(
    gang_prometheus, gang_truth
) -> None:
    """`manage.py ingest --now` measures a sharded source in shards (each query names the
    shard or the combiner that asked it), `--no-shards` in one piece; both store the truth."""
    source = Source.objects.create(
        name="command",
        url=gang_prometheus.url,
        scrape_interval_seconds=60,
        shard_node_patterns=NODE_PATTERNS,
    )
    start = datetime(2026, 9, 30, 15, tzinfo=UTC)
    end = start + timedelta(hours=1)
    span = ["--source", "command", "--start", start.isoformat(), "--end", end.isoformat()]
    for extra, shards_named in (([], {0, 1, 2, "combiner"}), (["--no-shards"], set())):
        call_command("ingest", *span, "--now", *extra, stdout=io.StringIO())
        windows = IngestWindow.objects.filter(source=source)
        assert set(windows.values_list("status", flat=True)) == {"done"}
        named = {query.get("shard") for window in windows for query in window.recorded_queries}
        assert named - {None} == shards_named
        assert stored_alloc(source.pk) == truth_alloc(gang_truth, start, end)
    assert not IngestBatch.objects.exists()
