"""A task's identity over time: a Job deleted and submitted again under its name, a pod name
taken over within a window, a namespace that moves to another team. Against a real
Prometheus back-filled with promtool (tests/metering/jobs.py), two A100s on one node.

kube-state-metrics names a pod's owner by kind and name (`kube_pod_owner` has no owner uid),
so a Job submitted again under its name is the same task (docs/telemetry.md "Who is who").

- 2026-10-12 10:00-10:30 UTC (18:00 in the pool's zone, peak): Job `sweep` of `ml` runs
  10:00-10:10 under priority class `training-batch`, is deleted, and is submitted again
  10:20-10:30 under `inference-critical` (new pods, new uids). 480 GPU-seconds each run.
- 11:00-11:30 on 12 October: Job `llm` of `nlp` has three pods preempted (11:07, 11:17,
  11:27), then the Job is deleted. On 2 November (pool zone) it is submitted again: its pod,
  scheduled at 01:40 UTC, is preempted at 02:07 UTC (10:07 in the zone, peak) after 1,620 s.
- 11:50-12:10: bare pod `runner-0` of `lab`, labelled task `eval-a` and team `red`, runs
  until 12:02:30; another pipeline creates a pod of the same name at 12:02:30, labelled task
  `eval-b` and team `blue`, which runs until 12:10 (600 and 360 GPU-seconds).
- 13:00-13:30 (21:00 in the zone, peak): namespace `serving` (StatefulSet `vllm`, model
  `llama`) moves from team `chat` to team `search` at 13:16: its pod's team label changes.
  Every interval of it breaches the default SLO (160 requests of 2 s) while Job `vit` of
  `vision` trains on the other GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import PriceBook
from billing.scenarios import scenario_build, scenario_price
from billing.services import price_book_ensure_default
from metering.models import (
    IngestWindow,
    PodWait,
    Preemption,
    Service,
    Task,
    Team,
    UsageInterval,
)
from metering.selectors import ServiceTeamMoved, services_team_moved, window_blind_spots
from simulator.prometheus import PrometheusProcess
from tests.metering.jobs import (
    KSM,
    SCRAPE,
    backfilled_prometheus,
    device_series,
    ingest_command,
    jobs_source,
)
from tests.slow import starts

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

STEP = timedelta(seconds=300)
DAY = datetime(2026, 10, 12, tzinfo=UTC)
SWEEP = DAY + timedelta(hours=10)
LLM = DAY + timedelta(hours=11)
LLM_AGAIN = datetime(2026, 11, 2, 2, tzinfo=UTC)
RUNNER = DAY + timedelta(hours=11, minutes=50)
SERVING = DAY + timedelta(hours=13)
MOVED_AT = SERVING + timedelta(minutes=16)
# The spans the GPUs report over: ten minutes before the first pod to a step after the last.
SPANS = ((SWEEP - timedelta(minutes=10), SERVING + 7 * STEP), (LLM_AGAIN - timedelta(hours=1),
         LLM_AGAIN + 4 * STEP))  # fmt: skip


def _at(moment: datetime, minutes: float) -> int:
    return int((moment + timedelta(minutes=minutes)).timestamp())


@dataclass(frozen=True)
class Pod:
    """One pod as kube-state-metrics shows it from `shown` (its scheduling, 30 s after its
    creation, unless a label changed later) to `until`, holding GPU `gpu` throughout; an
    evicted pod shows its preemption reason for two scrapes from `until` on."""

    namespace: str
    name: str
    owner: tuple[str, str]
    labels: str
    priority_class: str
    gpu: int
    created: int
    until: int
    evicted: bool = False
    shown: int | None = None

    def kube(self, *, evicted: bool) -> list[str]:
        base = f'{KSM},namespace="{self.namespace}",pod="{self.name}",uid="uid-{self.created}"'
        labels = f",{self.labels}" if self.labels else ""
        return [
            f"kube_pod_created{{{base}}} {self.created}",
            f"kube_pod_status_scheduled_time{{{base}}} {self.created + 30}",
            f'kube_pod_info{{{base},node="node-1",priority_class="{self.priority_class}"}} 1',
            f'kube_pod_owner{{{base},owner_kind="{self.owner[0]}",owner_name="{self.owner[1]}"}} 1',
            f"kube_pod_labels{{{base}{labels}}} 1",
            f'kube_pod_container_resource_requests{{{base},container="main",'
            'resource="nvidia_com_gpu",unit="integer"} 1',
            f'kube_pod_status_phase{{{base},phase="{"Failed" if evicted else "Running"}"}} 1',
            f'kube_pod_status_reason{{{base},reason="PreemptionByScheduler"}} {int(evicted)}',
        ]


TRAINING, INFERENCE = "training-batch", "inference-critical"
PODS = (
    Pod("ml", "sweep-4kx7p", ("Job", "sweep"), "", TRAINING, 0, _at(SWEEP, -0.5), _at(SWEEP, 10)),
    Pod("ml", "sweep-q2m9d", ("Job", "sweep"), "", INFERENCE, 0, _at(SWEEP, 19.5), _at(SWEEP, 30)),
    *(
        Pod("nlp", pod, ("Job", "llm"), "", TRAINING, 1, _at(LLM, minutes - 0.5),
            _at(LLM, minutes + 7), evicted=True)
        for pod, minutes in (("llm-5hd8s", 0), ("llm-9wq2z", 10), ("llm-c7t4r", 20))
    ),
    Pod("nlp", "llm-m3n8v", ("Job", "llm"), "", TRAINING, 1, _at(LLM_AGAIN, -20.5),
        _at(LLM_AGAIN, 7), evicted=True),
    Pod("lab", "runner-0", ("<none>", "<none>"), 'label_task="eval-a",label_team="red"',
        TRAINING, 0, _at(RUNNER, -0.5), _at(RUNNER, 12.5)),
    Pod("lab", "runner-0", ("<none>", "<none>"), 'label_task="eval-b",label_team="blue"',
        TRAINING, 0, _at(RUNNER, 12.5), _at(RUNNER, 20)),
    Pod("serving", "vllm-0", ("StatefulSet", "vllm"), 'label_team="chat"', INFERENCE, 0,
        _at(SERVING, -0.5), _at(MOVED_AT, 0)),
    Pod("serving", "vllm-0", ("StatefulSet", "vllm"), 'label_team="search"', INFERENCE, 0,
        _at(SERVING, -0.5), _at(SERVING, 30), shown=_at(MOVED_AT, 0)),
    Pod("vision", "vit-x8k2p", ("Job", "vit"), "", TRAINING, 1, _at(SERVING, -0.5),
        _at(SERVING, 30)),
)  # fmt: skip


def _served(tick: int) -> list[str]:
    """vLLM's e2e histogram of `serving/vllm-0`: 40 requests of 2 s a scrape since 13:00."""
    count = 40 * len(range(_at(SERVING, 0), tick + 1, SCRAPE))
    labels = 'model_name="llama",job="vllm",instance="10.244.3.8:8000",namespace="serving"'
    labels += ',pod="vllm-0"'
    metric = "vllm:e2e_request_latency_seconds"
    bounds = (("0.5", 0), ("1.0", 0), ("2.5", count), ("+Inf", count))
    return [
        *(f'{metric}_bucket{{le="{le}",{labels}}} {n}' for le, n in bounds),
        f"{metric}_count{{{labels}}} {count}",
        f"{metric}_sum{{{labels}}} {2 * count}",
    ]


def series_at() -> dict[int, list[str]]:
    """Pods report only between window boundaries, as in tests/metering/jobs.py."""
    lines: dict[int, list[str]] = {}
    for begin, end in SPANS:
        for tick in range(int(begin.timestamp()), int(end.timestamp()), SCRAPE):
            inside = tick % STEP.seconds != 0
            holders: dict[int, tuple[str, str]] = {}
            lines[tick] = []
            for pod in PODS:
                shown = pod.created + 30 if pod.shown is None else pod.shown
                if shown <= tick < pod.until and inside:
                    holders[pod.gpu] = (pod.namespace, pod.name)
                    lines[tick] += pod.kube(evicted=False)
                elif pod.evicted and pod.until <= tick < pod.until + 2 * SCRAPE:
                    lines[tick] += pod.kube(evicted=True)
            for gpu in (0, 1):
                lines[tick] += device_series(f"GPU-{gpu}", gpu, holders.get(gpu))
            if _at(SERVING, 0) < tick < _at(SERVING, 30) and inside:
                lines[tick] += _served(tick)
    return lines


@pytest.fixture(scope="module")
@starts("Prometheus")
def identity_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    running = backfilled_prometheus(tmp_path_factory.mktemp("identity-over-time"), series_at())
    yield running
    running.stop()


def engine_teams(start: datetime, end: datetime) -> dict[str, dict[str, str]]:
    """Each team's rounded lines and total for [start, end), as a close prices that range."""
    book = PriceBook.objects.get(version=1)
    result = scenario_price(scenario_build(start=start, end=end, price_book=book)).result
    return {
        team.team: {line.kind: str(line.rounded) for line in team.lines}
        | {"total": str(team.total)}
        for team in result.teams
    }


def gpu_seconds(**task) -> dict[str, Decimal]:
    rows = UsageInterval.objects.filter(**{f"task__{k}": v for k, v in task.items()})
    found: dict[str, Decimal] = {}
    for name, alloc in rows.values_list("task__external_id", "alloc_gpu_seconds"):
        found[name] = found.get(name, Decimal(0)) + alloc
    return found


@pytest.fixture
def source(identity_prometheus: PrometheusProcess) -> None:
    price_book_ensure_default()
    jobs_source(identity_prometheus.url)


def sweep_ingested_in_one_batch() -> None:
    ingest_command(SWEEP, SWEEP + 6 * STEP, "--batch", "12")


def sweep_ingested_window_by_window_then_its_first_run_again() -> None:
    ingest_command(SWEEP, SWEEP + 6 * STEP, "--batch", "1")
    ingest_command(SWEEP, SWEEP + 2 * STEP)  # late samples, say: the first run's windows


@pytest.mark.parametrize(
    "ingest",
    [sweep_ingested_in_one_batch, sweep_ingested_window_by_window_then_its_first_run_again],
)
def test_it_prices_a_job_submitted_again_as_the_kind_of_its_latest_run(source, ingest) -> None:
    ingest()

    sweep = Task.objects.get(namespace="ml", external_id="sweep")
    assert gpu_seconds(namespace="ml") == {"sweep": 960}
    assert sweep.kind == "inference"
    # One row for both runs, first seen with the first; each run's pod keeps its own wait.
    assert sweep.first_seen == SWEEP
    assert sorted(PodWait.objects.filter(task=sweep).values_list("pod", "seconds")) == [
        ("sweep-4kx7p", 30),
        ("sweep-q2m9d", 30),
    ]
    # Peak, 2 GPUs: C = 14.374; the reserve (180 of each interval's 600) covers 180 of the
    # 240 GPU-seconds of each of the four intervals, so ml carries all of B = 4.3122 and
    # 4 x 60 GPU-seconds at R. As training_batch it would be 960 x 14.374 / 3600 = 3.83.
    assert engine_teams(SWEEP, SWEEP + 6 * STEP) == {
        "ml": {"baseline": "4.31", "standard": "0.96", "total": "5.27"}
    }


def test_it_counts_a_jobs_preemptions_on_from_its_run_before(source) -> None:
    ingest_command(LLM, LLM + 6 * STEP)
    ingest_command(LLM_AGAIN, LLM_AGAIN + 3 * STEP)

    llm = Task.objects.get(namespace="nlp", external_id="llm")
    events = list(Preemption.objects.filter(task=llm).values_list("pod", "seconds_since_start"))
    assert events == [("llm-5hd8s", 420), ("llm-9wq2z", 420), ("llm-c7t4r", 420),
                      ("llm-m3n8v", 1620)]  # fmt: skip
    assert "compensation" not in engine_teams(LLM, LLM + 6 * STEP)["nlp"]
    # The run submitted again in November is preempted once, and that is the task's fourth
    # preemption (N = 3): min(1800, 1620) x 1 GPU x 14.374 / 3600 = 6.4683 credited. Counted
    # as a task of its own, it would be its first, with no credit.
    assert engine_teams(LLM_AGAIN, LLM_AGAIN + 3 * STEP)["nlp"]["compensation"] == "-6.47"


TAKEN_OVER = (
    "attribution: pod lab/runner-0 was created anew within the interval (scheduled 12:03:00"
    " UTC): task eval-a, team red, training-batch before, task eval-b, team blue,"
    " training-batch after; all 240 of its GPU-seconds are counted as the latter's"
    " (dcgm-exporter names the pod, not its uid)"
)


def test_it_gives_a_window_to_the_pod_that_holds_its_name_at_the_end(source) -> None:
    ingest_command(RUNNER, RUNNER + 4 * STEP)

    # eval-a ran 600 GPU-seconds (120 of them in the 12:00 window), eval-b 360 (120 there):
    # the window's pod is read at its end, so all 240 of 12:00 are eval-b's.
    assert gpu_seconds(namespace="lab") == {"eval-a": 480, "eval-b": 480}
    # Not silently: the window says so, and no other does.
    taken_over = {
        window.start: [w for w in window.warnings if "created anew" in w]
        for window in IngestWindow.objects.filter(start__gte=RUNNER).order_by("start")
    }
    assert taken_over == {RUNNER + n * STEP: [TAKEN_OVER] if n == 2 else [] for n in range(4)}
    assert sorted(
        Task.objects.filter(namespace="lab").values_list("external_id", "team__name")
    ) == [
        ("eval-a", "red"),
        ("eval-b", "blue"),
    ]
    # The pod of the same name is a new pod (scheduled anew): its wait is eval-b's own.
    waits = PodWait.objects.filter(pod="runner-0").order_by("created")
    assert list(waits.values_list("task__external_id", "seconds")) == [
        ("eval-a", 30),
        ("eval-b", 30),
    ]


def test_it_bills_a_moved_namespaces_tasks_by_interval_and_its_service_to_the_team_before(
    source,
) -> None:
    ingest_command(SERVING, SERVING + 3 * STEP)
    ingest_command(SERVING + 3 * STEP, SERVING + 6 * STEP)

    rows = Task.objects.filter(namespace="serving").order_by("first_seen")
    assert [(t.team.name, t.first_seen) for t in rows] == [
        ("chat", SERVING),
        ("search", SERVING + 3 * STEP),
    ]
    assert Service.objects.get(external_id="serving/llama").team.name == "chat"
    # Six breached peak intervals while vit trains: vision pays 6 x 20.00. The pod's usage
    # and baseline follow its team interval by interval (three each); the credit goes to
    # the service's team, which is the one its namespace had when ingest first met it.
    assert engine_teams(SERVING, SERVING + 6 * STEP) == {
        "chat": {
            "baseline": "2.16",
            "sla_credit": "-120.00",
            "standard": "0.72",
            "total": "-117.12",
        },
        "search": {"baseline": "2.16", "standard": "0.72", "total": "2.88"},
        "vision": {"sla_penalty": "120.00", "standard": "5.75", "total": "125.75"},
    }


def test_it_shows_a_service_whose_namespace_moved_until_its_team_is_stated(source) -> None:
    ingest_command(SERVING, SERVING + 6 * STEP)
    service = Service.objects.get(external_id="serving/llama")
    judged = {"start": SERVING, "end": SERVING + 6 * STEP, "min_requests": 100}

    # Its credits go to chat, whose name its pod no longer carries from 13:16: shown, with the
    # hour the namespace's inference ran as search (as much as chat's, 900 GPU-seconds each).
    assert services_team_moved(**judged) == [
        ServiceTeamMoved(
            service="serving/llama", team="chat", ran_as="search", since=SERVING, hours=1
        )
    ]
    assert window_blind_spots(**judged).services_team_moved == 1
    # Judged by no interval (too few requests for rule 4), nothing moves: not shown.
    assert services_team_moved(**{**judged, "min_requests": 1000}) == []

    # An operator states the team as it is: no longer shown, and the credits stay with chat.
    service.team_stated = SERVING + 7 * STEP
    service.save(update_fields=["team_stated"])
    assert services_team_moved(**judged) == []
    assert engine_teams(SERVING, SERVING + 6 * STEP)["chat"]["sla_credit"] == "-120.00"


def test_it_credits_a_service_to_the_team_an_operator_gives_it_in_the_admin(
    source, admin_client
) -> None:
    ingest_command(SERVING, SERVING + 6 * STEP)
    service = Service.objects.get(external_id="serving/llama")
    search = Team.objects.get(name="search")

    answer = admin_client.post(
        reverse("admin:metering_service_change", args=[service.pk]),
        {
            "source": service.source_id,
            "external_id": service.external_id,
            "team": search.pk,
            "slo_p99_ms": service.slo_p99_ms,
            "is_key": "on",
        },
    )

    assert answer.status_code == 302, answer.content.decode()[:2000]
    service.refresh_from_db()
    assert service.team == search and service.team_stated is not None
    assert services_team_moved(start=SERVING, end=SERVING + 6 * STEP, min_requests=100) == []
    # Every credit of the range goes to search now, the intervals before the move included.
    assert engine_teams(SERVING, SERVING + 6 * STEP)["search"]["sla_credit"] == "-120.00"
