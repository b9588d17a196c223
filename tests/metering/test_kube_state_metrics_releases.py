"""Preemptions as three kube-state-metrics releases write `kube_pod_status_reason`, each pool
back-filled into a real Prometheus from the simulator (`--kube-state-metrics`):

- v2.0 to v2.18: a series per pod for each reason it knows (five since v2.10), 0 or 1, and
  none for `PreemptionByScheduler`: a preemption leaves no trace at all;
- v2.19: the same with `PreemptionByScheduler` (and two more reasons);
- v2.20 and after: a series only for a reason that is set, at 1.

The same pool (16 GPUs, seed 7: three preemptions from 08:00 to 10:00) is preempted alike
in all three; its truth does not change. Before this check, v2.18's windows stored no
preemption, were complete and said nothing: rule 5's starvation credits went unpaid without a
word. Now each window names the cause and the month cannot close on them unaccepted; and a
v2.19 that misses an interval's scrapes is not taken for an older release."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from metering.measure import PREEMPTIONS_UNREADABLE
from metering.models import IngestWindow, Preemption, Source
from metering.selectors import usage_report
from simulator.config import PoolConfig
from simulator.prometheus import PrometheusProcess
from tests.metering.conftest import (
    ingest_span,
    simulated_prometheus,
    source_remove,
)

pytestmark = pytest.mark.slow

BASE = PoolConfig(gpus=16, days=1, start=date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
# 08:00-10:00 in Shanghai, where inference's morning peak preempts training.
SPAN = (BASE.start_epoch + 8 * 3600, BASE.start_epoch + 10 * 3600)
UNREADABLE = PREEMPTIONS_UNREADABLE.format(reason="PreemptionByScheduler")


# In a fourth pool (v2.19), kube-state-metrics misses the scrapes of one interval and answers
# again on its end (restarted, say), with no preemption inside: the interval's pods are read
# there, and its reasons, over the interval, are not.
KSM_SILENT = (BASE.start_epoch + 8 * 3600 + 40 * 60, BASE.start_epoch + 8 * 3600 + 45 * 60)


def ksm_silent(metrics: Path) -> None:
    """Drops kube-state-metrics' samples in KSM_SILENT from the metrics file."""
    kept = []
    with metrics.open() as lines:
        for line in lines:
            if 'job="kube-state-metrics"' in line:
                at = int(line.rsplit(" ", 1)[1])
                if KSM_SILENT[0] <= at < KSM_SILENT[1]:
                    continue
            kept.append(line)
    metrics.write_text("".join(kept))


@pytest.fixture(scope="module", params=["2.18", "2.19", "2.20", "2.19, silent"])
def release_pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict, PrometheusProcess]]:
    release = request.param.split(",")[0]
    config = replace(BASE, kube_state_metrics=release)
    out = tmp_path_factory.mktemp(f"ksm-{release}")
    edit = ksm_silent if request.param.endswith("silent") else None
    for truth, prometheus in simulated_prometheus(config, out, edit):
        yield request.param, truth, prometheus


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def expected_preemptions(truth: dict) -> list[tuple]:
    return sorted(
        (task_id, p["pod"], p["at"], Decimal(str(p["gpus"])), p["seconds_since_start"])
        for task_id, task in truth["tasks"].items()
        for p in task["preemptions"]
    )


@pytest.mark.django_db(transaction=True)
def test_it_sees_preemptions_or_says_it_cannot(release_pool) -> None:
    release, truth, prometheus = release_pool
    expected = expected_preemptions(truth)
    assert len(expected) == 3, "the pool should preempt three tasks from 08:00 to 10:00"
    source = Source.objects.create(
        name=f"ksm-{release.replace(', ', '-')}", url=prometheus.url, scrape_interval_seconds=60
    )
    try:
        ingest_span(source, at(SPAN[0]), at(SPAN[1]), batch=12)
        windows = list(IngestWindow.objects.filter(source=source).order_by("start"))
        found = sorted(
            (p.task.external_id, p.pod, p.at.strftime("%Y-%m-%dT%H:%M:%SZ"), p.gpus,
             p.seconds_since_start)
            for p in Preemption.objects.filter(task__source=source).select_related("task")
        )  # fmt: skip
        assert len(windows) == 24
        assert {w.status for w in windows} == {"done"}
        assert all(w.completeness == 1 for w in windows)
        unreadable = [w for w in windows if UNREADABLE in w.warnings]
        report = usage_report(start=at(SPAN[0]), end=at(SPAN[1]), group_by="team")
        assert report["windows_without_preemptions"] == len(unreadable)
        if release == "2.18":
            assert found == []
            assert unreadable == windows
            assert all(w.preemptions_unreadable for w in windows)
        else:
            assert found == expected
            assert unreadable == []
            assert not any(w.preemptions_unreadable for w in windows)
    finally:
        source_remove(source.pk)
