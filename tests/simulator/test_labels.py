"""Series carry the real exporters' names and label keys (tests/fixtures/exposition/)."""

from __future__ import annotations

import re
from collections import defaultdict

from tests.simulator.conftest import exposition_sample

SAMPLE_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} ", re.MULTILINE)
LABEL_KEY = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="')
TARGET = {"job", "instance"}  # added by Prometheus at scrape time
POD_KEYS = {"container", "namespace", "pod"}


def real_label_keys(text: str) -> dict[str, set[frozenset[str]]]:
    keys = defaultdict(set)
    for name, labels in SAMPLE_LINE.findall(text):
        keys[name].add(frozenset(LABEL_KEY.findall(labels)))
    return keys


def normalized(keys: frozenset[str]) -> set[str]:
    """Fold the spellings metering must accept into the real exporter's own."""
    renamed = {"hostname": "Hostname", "exported_pod": "pod", "exported_namespace": "namespace"}
    renamed["exported_container"] = "container"
    return {renamed.get(k, k) for k in keys} - TARGET


def test_it_uses_dcgm_exporter_names_and_labels(fixtures_dir, readback):
    text = exposition_sample(fixtures_dir, "dcgm-exporter.txt")
    real = real_label_keys(text)
    core = {"gpu", "UUID", "device", "modelName", "Hostname"}
    assert all(core <= keys for keys in real["DCGM_FI_DEV_FB_USED"])
    assert any(POD_KEYS <= keys for sets in real.values() for keys in sets)
    ours = [name for name in readback.label_keys if name.startswith("DCGM_")]
    assert set(ours) == {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    }
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    assert set(ours) <= families
    mig = {"GPU_I_PROFILE", "GPU_I_ID"}
    for name in ours:
        for keys in readback.label_keys[name]:
            assert normalized(keys) - mig in (core, core | POD_KEYS), (name, keys)


def test_it_shows_every_label_spelling_but_never_two_on_one_series(readback):
    keys = set().union(*readback.label_keys["DCGM_FI_DEV_FB_USED"])
    assert {"Hostname", "hostname", "pod", "exported_pod", "exported_namespace"} <= keys
    for keyset in readback.label_keys["DCGM_FI_DEV_FB_USED"]:
        assert not {"Hostname", "hostname"} <= keyset
        assert not {"pod", "exported_pod"} <= keyset
        assert ("GPU_I_PROFILE" in keyset) == ("GPU_I_ID" in keyset)


def test_it_reports_shared_gpus_as_the_exporter_does(readback):
    # MIG instances appear with their profile; a time-sliced GPU once bare plus once per pod.
    assert any("GPU_I_PROFILE" in k for k in readback.label_keys["DCGM_FI_DEV_FB_USED"])
    assert not any("GPU_I_PROFILE" in k for k in readback.label_keys["DCGM_FI_DEV_GPU_UTIL"])
    assert readback.timesliced_ticks_with_pods > 0


def test_it_uses_vllm_names_and_buckets(fixtures_dir, readback):
    real_text = exposition_sample(fixtures_dir, "vllm.txt")
    real = real_label_keys(real_text)
    name = "vllm:e2e_request_latency_seconds_bucket"
    assert real[name] == {frozenset({"le", "model_name"})}
    for keys in readback.label_keys[name]:
        assert normalized(keys) == {"le", "model_name", "namespace", "pod"}
    for suffix in ("_sum", "_count"):
        assert readback.label_keys[f"vllm:e2e_request_latency_seconds{suffix}"]
    real_bounds = set(re.findall(rf'^{re.escape(name)}\{{le="([^"]+)"', real_text, re.MULTILINE))
    service = next(iter(readback.latency.values()))
    ours = set().union(*(per_le.keys() for per_le in service.values()))
    assert real_bounds <= ours and "+Inf" in ours


def test_it_uses_cadvisor_names_and_both_levels(fixtures_dir, readback):
    real = real_label_keys(exposition_sample(fixtures_dir, "cadvisor.txt"))
    names = [
        "container_fs_reads_total",
        "container_fs_writes_total",
        "container_fs_reads_bytes_total",
        "container_fs_writes_bytes_total",
    ]
    for name in names:
        assert all("device" in keys for keys in real[name])
        # kubelet's /metrics/cadvisor adds namespace/pod/container (see the samples' SOURCES).
        for keys in readback.label_keys[name]:
            assert normalized(keys) == {"device", "namespace", "pod", "container"}
    levels = list(readback.cadvisor_levels.values())
    assert any(len(found) > 1 and "" in found for found in levels)  # container + pod level
    assert {""} in levels  # pod level only, as on containerd


def test_it_labels_kube_state_metrics_series(readback):
    pod = {"namespace", "pod", "uid"}
    expected = {
        "kube_pod_created": pod,
        "kube_pod_status_scheduled_time": pod,
        "kube_pod_info": pod
        | {"priority_class", "node", "created_by_kind", "created_by_name", "host_ip", "pod_ip"},
        "kube_pod_owner": pod | {"owner_kind", "owner_name", "owner_is_controller"},
        "kube_pod_container_resource_requests": pod | {"container", "resource", "unit"},
        "kube_pod_status_phase": pod | {"phase"},
        "kube_pod_status_reason": pod | {"reason"},
    }
    for name, keys in expected.items():
        for keyset in readback.label_keys[name]:
            assert keys <= normalized(keyset), (name, keyset)
    label_sets = {frozenset(normalized(k) - pod) for k in readback.label_keys["kube_pod_labels"]}
    # Some pods lack the task (or team) label: identity then falls back to owner / namespace.
    assert {frozenset({"label_task", "label_team"}), frozenset({"label_team"})} <= label_sets
