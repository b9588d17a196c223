"""A window is never re-attributed to guesses without an operator saying so: re-ingested from a
Prometheus that holds the GPU exporter's series but none of kube-state-metrics' (its series
deleted, or another Prometheus that never scraped it), every sample is there, so completeness
stays 1, but each pod's task, team and kind would be guessed from its name and namespace.

Before this guard, the six windows of Job `etl` (team `red`, then `blue`) were replaced
without a word by rows of a task `etl-b8d4c` of team `gamma`, completeness 1, and the next
close of their month would have moved their money by correction lines. Against real
Prometheus processes back-filled with promtool (tests/metering/jobs.py)."""

from __future__ import annotations

import getpass
from decimal import Decimal

import pytest

from audit.models import AuditEntry
from metering.measure import UNDESCRIBED
from metering.models import IngestWindow, Source, UsageInterval
from metering.selectors import usage_report
from tests.metering.jobs import (  # noqa: F401 (fixtures)
    RELABEL_END,
    RELABEL_START,
    ingest_command,
    jobs_prometheus,
    jobs_source,
    jobs_tsdb,
    undescribed_prometheus,
    unlabelled_prometheus,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db]
REASON = "kube-state-metrics' series were deleted to save space (OPS-207); bill the guesses"
GUESSED = UNDESCRIBED.format(count=1, seconds="240.000000", example="gamma/etl-b8d4c")


def usage() -> list[tuple]:
    return list(
        UsageInterval.objects.order_by("interval_start").values_list(
            "task__external_id", "task__team__name", "task__kind", "alloc_gpu_seconds"
        )
    )


def windows() -> list[IngestWindow]:
    return list(IngestWindow.objects.filter(start__gte=RELABEL_START).order_by("start"))


def coverage() -> list[tuple]:
    return [(w.content_hash, w.described_gpu_seconds, w.undescribed_gpu_seconds) for w in windows()]


KNOWN = [("etl", "red", "training_batch", Decimal(240))] * 3 + [
    ("etl", "blue", "training_batch", Decimal(240))
] * 3


@pytest.mark.parametrize("lost", ["all", "labels"])
def test_it_keeps_the_rows_kube_state_metrics_described_when_its_series_are_gone(
    request: pytest.FixtureRequest,
    jobs_prometheus,  # noqa: F811
    lost: str,
) -> None:
    """Without any of kube-state-metrics' series, or without `kube_pod_labels` alone (the
    owner `etl` is known, the team label is not: every window would go to team `gamma`)."""
    fixture = {"all": "undescribed_prometheus", "labels": "unlabelled_prometheus"}[lost]
    elsewhere = request.getfixturevalue(fixture)
    source = jobs_source(jobs_prometheus.url)
    ingest_command(RELABEL_START, RELABEL_END)
    assert usage() == KNOWN
    stored = [
        (w.content_hash, w.described_gpu_seconds, w.undescribed_gpu_seconds) for w in windows()
    ]
    assert [row[1:] for row in stored] == [(Decimal(240), Decimal(0))] * 6
    Source.objects.filter(pk=source.pk).update(url=elsewhere.url)

    output = ingest_command(RELABEL_START, RELABEL_END)

    assert "warning: 6 windows kept their stored rows" in output
    assert usage() == KNOWN
    assert coverage() == stored
    for window in windows():
        assert window.warnings[0].startswith("kept the stored rows: ")
        assert (
            "completeness 1.000000 (stored 1.000000, minimum 0.99) and 0.000000 GPU-seconds on"
            " pods kube-state-metrics described (stored 240.000000), 240.000000 on pods whose"
            " task, team and kind would be guesses (stored 0.000000)"
        ) in window.warnings[0]


def test_it_replaces_them_with_guesses_only_when_an_operator_accepts_the_loss(
    jobs_prometheus,  # noqa: F811
    undescribed_prometheus,  # noqa: F811
) -> None:
    source = jobs_source(jobs_prometheus.url)
    ingest_command(RELABEL_START, RELABEL_END)
    Source.objects.filter(pk=source.pk).update(url=undescribed_prometheus.url)

    ingest_command(RELABEL_START, RELABEL_END, "--accept-loss", "--reason", REASON)

    assert usage() == [("etl-b8d4c", "gamma", "training_batch", Decimal(240))] * 6
    for window in windows():
        assert window.completeness == 1
        assert (window.described_gpu_seconds, window.undescribed_gpu_seconds) == (0, 240)
        assert window.warnings == [GUESSED]
    entry = AuditEntry.objects.get(object_type="metering.ingestwindow", action="change")
    assert entry.changes["accepted_by"] == f"{getpass.getuser()} (manage.py ingest --accept-loss)"
    assert entry.changes["reason"] == REASON
    assert [
        (w["described_gpu_seconds"], w["undescribed_gpu_seconds"]) for w in entry.changes["windows"]
    ] == [(["240.000000", "0.000000"], ["0.000000", "240.000000"])] * 6


def test_it_says_whose_identity_it_guessed_on_a_first_ingest(
    undescribed_prometheus,  # noqa: F811
) -> None:
    jobs_source(undescribed_prometheus.url)
    ingest_command(RELABEL_START, RELABEL_END)
    assert [(w.undescribed_gpu_seconds, w.warnings) for w in windows()] == [
        (Decimal(240), [GUESSED])
    ] * 6
    report = usage_report(start=RELABEL_START, end=RELABEL_END, group_by="team")
    assert report["windows_with_guessed_identity"] == 6
