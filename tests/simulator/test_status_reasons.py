"""`kube_pod_status_reason` as each kube-state-metrics release writes it (`--kube-state-metrics`,
simulator.workload.KSM_STATUS_REASONS): the series of one pod before and after its preemption.
The pool's truth is the same whatever the release."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

import pytest

from simulator.config import PoolConfig, SimulatorConfigError
from simulator.pool import Pool

DAY = PoolConfig(gpus=16, days=1, start=dt.date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
REASON = re.compile(r'kube_pod_status_reason\{.*,reason="([^"]+)"\} (\d)')


def reasons_of_preempted_pod(release: str) -> tuple[dict[str, int], dict[str, int]]:
    """The reasons written for the pool's first preempted pod while it ran, and once preempted."""
    pool = Pool(replace(DAY, kube_state_metrics=release))
    running: dict[str, dict[str, int]] = {}
    for tick in pool.config.ticks():
        pool.step(tick)
        for pod in pool.running:
            running[pod.name] = dict(REASON.findall("\n".join(pod.ksm_lines)))
        for pod in pool.lingering:  # shown once more, ended, before it goes
            if pod.preempted:
                return running[pod.name], dict(REASON.findall("\n".join(pod.ksm_lines)))
    raise AssertionError("the day should preempt a pod")


@pytest.mark.parametrize(
    ("release", "before", "after"),
    [
        ("2.18", {"Evicted": "0", "NodeLost": "0"}, {"Evicted": "0", "NodeLost": "0"}),
        ("2.19", {"PreemptionByScheduler": "0"}, {"PreemptionByScheduler": "1"}),
        ("2.20", {}, {"PreemptionByScheduler": "1"}),
        ("", {"PreemptionByScheduler": "0"}, {"PreemptionByScheduler": "1"}),
    ],
)
def test_it_writes_the_reasons_as_the_release_does(release, before, after) -> None:
    running, preempted = reasons_of_preempted_pod(release)
    assert before.items() <= running.items()
    assert after.items() <= preempted.items()
    if release == "2.18":
        assert len(running) == 5 and "PreemptionByScheduler" not in preempted
    if release == "2.19":
        assert len(running) == 8 and set(running.values()) == {"0"}
    if release in ("2.20", ""):
        assert len(preempted) == 1


def test_it_refuses_an_unknown_release_naming_the_argument() -> None:
    with pytest.raises(SimulatorConfigError, match=r"--kube-state-metrics must be one of 2\.18"):
        replace(DAY, kube_state_metrics="2.17")
