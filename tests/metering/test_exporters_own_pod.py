"""Which pod on a dcgm-exporter series is the exporter itself, in pure Python
(`measure._exporters_own_series_freed`): a ServiceMonitor's scrape writes the exporter's own
pod on every free GPU's series and on the target's `up`; kube-state-metrics may describe the
pod, or not (its shard silent). Each case is one interval of one target holding one series:
freed, it becomes the GPU's bare series (a free GPU); kept, it is a pod holding the GPU,
billed to its team."""

from __future__ import annotations

import pytest

from metering.measure import Observed, PodIdentity, SeriesTicks, _exporters_own_series_freed

TARGET = ("dcgm-exporter", "10.0.0.7:9400")
EXPORTER = ("gpu-operator", "nvidia-dcgm-exporter-x7k2p")
DAEMONSET = PodIdentity(owned=True, owner_kind="DaemonSet", pod_ip="10.0.0.7")


def _interval(pod: tuple[str, str], identity: PodIdentity | None, named: set | None) -> Observed:
    interval = Observed()
    interval.series[("GPU-a", "", "", *pod)] = SeriesTicks(ticks=5, target=TARGET)
    if identity is not None:
        interval.identity[pod] = identity
    if named is not None:
        interval.target_pods[TARGET] = named
    return interval


@pytest.mark.parametrize(
    ("case", "pod", "identity", "named", "freed", "warned"),
    [
        # `up` names the exporter's pod: it is the exporter, described or not.
        ("up names it, a DaemonSet's", EXPORTER, DAEMONSET, {EXPORTER}, True, False),
        ("up names it, undescribed", EXPORTER, None, {EXPORTER}, True, True),
        # `instance` relabelled to the node's name: the address no longer tells it, `up` does.
        (
            "up names it, another address",
            EXPORTER,
            PodIdentity(owned=True, owner_kind="DaemonSet", pod_ip="10.9.9.9"),
            {EXPORTER},
            True,
            False,
        ),
        # A sidecar exporter in a training pod: `up` names the pod, kube-state-metrics says a Job
        # owns it; its GPU is held.
        (
            "up names a Job's pod",
            ("ml", "trainer-0"),
            PodIdentity(owned=True, owner_kind="Job", pod_ip="10.0.0.7"),
            {("ml", "trainer-0")},
            False,
            False,
        ),
        # A GPU workload of a DaemonSet on its host's network, at the exporter's address: `up`
        # names the exporter, not it; its GPU is held (the address alone freed it).
        (
            "up names another pod",
            ("infer", "edge-agent-abcde"),
            PodIdentity(owned=True, owner_kind="DaemonSet", pod_ip="10.0.0.7"),
            {EXPORTER},
            False,
            False,
        ),
        # `up` names no pod (a relabelling): kube-state-metrics and the address tell it.
        ("up unnamed, a DaemonSet's at the address", EXPORTER, DAEMONSET, None, True, False),
        (
            "up unnamed, a DaemonSet's elsewhere",
            EXPORTER,
            PodIdentity(owned=True, owner_kind="DaemonSet", pod_ip="10.9.9.9"),
            None,
            False,
            False,
        ),
        ("up unnamed, undescribed", EXPORTER, None, None, False, False),
    ],
)
def test_it_tells_the_exporters_own_pod(case, pod, identity, named, freed, warned) -> None:
    interval = _interval(pod, identity, named)
    exporters = _exporters_own_series_freed({0: interval})
    assert (("GPU-a", "", "", "", "") in interval.series) is freed, case
    assert exporters == ({pod[1]} if freed else set())
    told = [w for w in interval.warnings if "is the exporter's own" in w]
    assert len(told) == warned
