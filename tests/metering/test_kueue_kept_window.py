"""A window kept after a refused loss keeps its Kueue admissions (writer._kept_result,
_finding_stored): the other tests write the jsonb finding only on windows replaced. Against
the real Prometheus of tests/metering/jobs.py and an empty one (a review's test)."""

from __future__ import annotations

import pytest

from metering.models import IngestWindow
from metering.selectors import kueue_admissions
from tests.metering.jobs import (  # noqa: F401 (fixtures)
    ALPHA_START,
    BETA_START,
    empty_prometheus,
    ingest_command,
    jobs_prometheus,
    jobs_source,
    jobs_tsdb,
)
from tests.metering.test_window_replacement import closed_october_then_prometheus_lost

STORED = {"training_batch": {"workloads": 3, "seconds": "5400.250000"}}


@pytest.mark.slow
@pytest.mark.django_db
def test_it_keeps_a_kept_windows_kueue_admissions(
    jobs_prometheus,  # noqa: F811
    empty_prometheus,  # noqa: F811
) -> None:
    closed_october_then_prometheus_lost(jobs_prometheus.url, empty_prometheus.url)
    october = IngestWindow.objects.filter(start__gte=ALPHA_START, start__lt=BETA_START)
    assert october.update(kueue_admissions=STORED) == 12

    output = ingest_command(ALPHA_START, BETA_START)

    assert "warning: 12 windows kept their stored rows" in output
    assert list(october.values_list("kueue_admissions", flat=True)) == [STORED] * 12
    admitted = kueue_admissions(start=ALPHA_START, end=BETA_START)
    (found,) = admitted.per_kind
    assert (found.kind, found.workloads, str(found.seconds)) == (
        "training_batch",
        36,
        "64803.000000",
    )
    assert admitted.windows_unread == 0
