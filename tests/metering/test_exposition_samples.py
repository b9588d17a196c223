"""The real exporters' samples (tests/fixtures/exposition), back-filled into a real
Prometheus, are read as a real pool would be: label spellings, MiB, `le` spellings; bad series
are skipped and counted; label values in PromQL are escaped; late data is recorded."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from audit.models import AuditEntry
from metering import sources
from metering.models import CapacityInterval, IngestWindow, LatencyInterval, Source, UsageInterval
from tests.metering import exposition
from tests.metering.conftest import EDGE_SCRAPE, EDGE_START, ingest_span

FIRST = datetime.fromtimestamp(EDGE_START, UTC)
WINDOW = timedelta(seconds=300)


def edge_source(url: str, name: str = "samples", **fields) -> Source:
    return Source.objects.create(name=name, url=url, scrape_interval_seconds=EDGE_SCRAPE, **fields)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_reads_hostname_exported_pod_and_mib_from_the_dcgm_sample(edge_prometheus) -> None:
    source = edge_source(edge_prometheus.url)
    ingest_span(source, FIRST, FIRST + 2 * WINDOW)
    usage = UsageInterval.objects.get(task__external_id="ray-1111111", interval_start=FIRST)
    # No kube-state-metrics for this pod: task = pod, team = its (exported_) namespace.
    assert usage.task.team.name == "ray-llm"
    assert usage.task.kind == "training_batch"
    assert usage.alloc_gpu_seconds == 300  # one whole T4, 20 ticks x 15 s
    assert usage.memory_peak_bytes == exposition.VARIANT_MIB * 1_048_576
    assert usage.gpu_model == "Tesla T4"  # the sample's modelName
    # GPUs present: the sample's T4 with FB_USED, the variant node's T4 and 4 edge GPUs
    # without a model name, one capacity row per model.
    capacity = {
        row.gpu_model: (row.capacity_gpu_seconds, row.gpus_present)
        for row in CapacityInterval.objects.filter(source=source, interval_start=FIRST)
    }
    assert capacity == {"Tesla T4": (2 * 300, 2), "": (4 * 300, 4)}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_reads_vllm_buckets_with_any_le_spelling(edge_prometheus) -> None:
    source = edge_source(edge_prometheus.url)
    ingest_span(source, FIRST, FIRST + 2 * WINDOW)
    first = LatencyInterval.objects.get(service__external_id="serving/facebook/opt-125m")
    # The sample's one request, counted once: in the window where the series started.
    assert first.interval_start == FIRST
    assert first.buckets == [
        [le, 1] for le in ("1", "2.5", "5", "10", "15", "20", "30", "40", "50", "60", "+Inf")
    ]
    assert first.request_count == 1
    assert first.service.team.name == "serving"


@pytest.mark.slow
@pytest.mark.django_db
def test_it_skips_and_counts_series_with_nan_negative_or_missing_labels(edge_prometheus) -> None:
    source = edge_source(edge_prometheus.url)
    ingest_span(source, FIRST, FIRST + WINDOW)
    window = IngestWindow.objects.get(source=source, start=FIRST)
    assert window.status == "done"
    warnings = "\n".join(window.warnings)
    assert 'pod="nan-0"' in warnings and "NaN" in warnings
    assert 'pod="negative-0"' in warnings
    assert 'pod="orphan-0"' in warnings and "no namespace" in warnings
    # cAdvisor's stand-alone sample has no pod labels: skipped, not invented.
    assert "io: series" in warnings
    kept = set(
        UsageInterval.objects.filter(task__source=source).values_list(
            "task__external_id", flat=True
        )
    )
    assert kept == {"good-0", "ray-1111111"}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_escapes_label_values_in_promql(edge_prometheus) -> None:
    source = edge_source(
        edge_prometheus.url,
        name="weird",
        label_mapping={"matchers": {"cluster": exposition.WEIRD_CLUSTER}},
    )
    plan = sources.query_plan_for(source, step_seconds=300)
    assert 'cluster="we\\"ird\\\\cluster"' in sources.devices_query(plan)
    ingest_span(source, FIRST, FIRST + WINDOW)
    window = IngestWindow.objects.get(source=source)
    assert window.status == "done", window.error
    # Only the series carrying that cluster label: the edge GPUs, not the real samples.
    assert set(
        UsageInterval.objects.filter(task__source=source).values_list(
            "task__external_id", flat=True
        )
    ) == {"good-0"}
    assert CapacityInterval.objects.get(source=source).gpus_present == 4


@pytest.mark.slow
@pytest.mark.django_db
def test_it_records_when_late_data_changes_a_window(early_prometheus, edge_prometheus) -> None:
    source = edge_source(early_prometheus.url)
    ingest_span(source, FIRST, FIRST + WINDOW)
    early = UsageInterval.objects.get(task__external_id="good-0")
    assert early.alloc_gpu_seconds == 150  # only the first 10 ticks had arrived
    window = IngestWindow.objects.get(source=source)
    assert window.first_written and window.changed_after_first_write is None
    first_hash = window.content_hash
    # No `up` in these samples: a GPU seen in the window is expected at all of its 20 ticks.
    # GPU-edge-1 missed 10 of them; 6 GPUs in all.
    assert window.completeness == Decimal("0.916667")  # (5 x 20 + 10) / (6 x 20)
    assert window.completeness_warnings == [
        "completeness: node 10.0.0.9:9400 (dcgm-exporter 10.0.0.9:9400) missing 1 GPU(s):"
        " GPU-edge-1 150 s"
    ]

    source.url = edge_prometheus.url  # the same history, now complete
    source.save()
    ingest_span(source, FIRST, FIRST + WINDOW)
    assert UsageInterval.objects.get(task__external_id="good-0").alloc_gpu_seconds == 300
    window.refresh_from_db()
    assert window.content_hash != first_hash
    assert window.changed_after_first_write >= window.first_written
    assert window.completeness == 1 and window.completeness_warnings == []


@pytest.mark.slow
@pytest.mark.django_db
def test_it_creates_the_default_source_from_prometheus_url(edge_prometheus) -> None:
    out = io.StringIO()
    with override_settings(PROMETHEUS_URL=edge_prometheus.url):
        call_command(
            "ingest",
            "--source",
            "default",
            "--start",
            "2026-10-05T00:00:00Z",
            "--end",
            "2026-10-05T08:10:00+08:00",
            "--now",
            verbosity=2,  # a line per window
            stdout=out,
        )
    source = Source.objects.get(name="default")
    assert source.url == edge_prometheus.url
    assert IngestWindow.objects.filter(source=source, status="done").count() == 2
    assert "2026-10-05T00:05:00Z done" in out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db
def test_it_points_the_default_source_at_prometheus_url_when_it_changes(edge_prometheus) -> None:
    """The demo's second start finds its Prometheus on another free port."""
    Source.objects.create(name="default", url="http://127.0.0.1:9", bearer_token="kept")
    with override_settings(PROMETHEUS_URL=edge_prometheus.url):
        call_command(
            "ingest", "--source", "default", "--start", "2026-10-05T00:00:00Z",
            "--end", "2026-10-05T00:05:00Z", "--now", stdout=io.StringIO(),
        )  # fmt: skip
    source = Source.objects.get(name="default")
    assert (source.url, source.bearer_token) == (edge_prometheus.url, "kept")
    assert IngestWindow.objects.filter(source=source, status="done").count() == 1
    change = AuditEntry.objects.filter(object_type="metering.source", action="change").last()
    assert change.changes == {"url": ["http://127.0.0.1:9", edge_prometheus.url]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (
            [
                "--source",
                "nowhere",
                "--start",
                "2026-10-05T00:00:00Z",
                "--end",
                "2026-10-05T01:00:00Z",
            ],
            "nowhere",
        ),
        (["--source", "x", "--start", "yesterday", "--end", "2026-10-05T01:00:00Z"], "--start"),
        (
            ["--source", "x", "--start", "2026-10-05T00:00:00", "--end", "2026-10-05T01:00:00Z"],
            "--start",
        ),
        (
            ["--source", "x", "--start", "2026-10-05T02:00:00Z", "--end", "2026-10-05T01:00:00Z"],
            "--end",
        ),
    ],
)
def test_it_refuses_bad_ingest_arguments_naming_them(arguments, named) -> None:
    with pytest.raises(CommandError, match=named):
        call_command("ingest", *arguments)
    assert not IngestWindow.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db
def test_it_refuses_a_bad_label_mapping_naming_the_field(edge_prometheus) -> None:
    source = edge_source(edge_prometheus.url, label_mapping={"task_label": "not a label"})
    ingest_span(source, FIRST, FIRST + WINDOW)
    window = IngestWindow.objects.get(source=source)
    assert window.status == "failed"
    assert "label_mapping.task_label" in window.error
    assert not UsageInterval.objects.filter(task__source=source).exists()
