"""A month holding windows off the present step's grid (TANDEM_STEP_SECONDS changed under
them) does not close, even accepted incomplete: priced beside the new step's windows, a span
would count twice, and the source holding them is metered no more."""

from __future__ import annotations

import pytest
from django.test import override_settings

from billing.models import PeriodClose
from billing.services import PeriodCloseRefused, period_close
from metering.models import IngestWindow
from tests.factories import window_split

pytestmark = pytest.mark.django_db


def test_it_refuses_to_close_a_month_holding_windows_of_another_step(boundary_pool) -> None:
    # One of the pool's hours metered in 300 s windows: each has an end off a 900 s grid.
    hour = IngestWindow.objects.filter(start__gte=boundary_pool.start).order_by("start").first()
    window_split(hour, 300)

    with override_settings(TANDEM_STEP_SECONDS=900), pytest.raises(PeriodCloseRefused) as refused:
        period_close(period="2026-09", accept_incomplete="Prometheus lost a day")

    said = [reason for reason in refused.value.reasons if "TANDEM_STEP_SECONDS 900" in reason]
    assert said == [
        f"source {hour.source.name} holds 12 window(s) of 300 s between"
        f" {hour.start:%Y-%m-%dT%H:%M:%SZ} and {hour.end:%Y-%m-%dT%H:%M:%SZ}"
        " that are off the grid of TANDEM_STEP_SECONDS 900: they were written under another"
        " step, and this one cannot tile the time around them, so the source is metered no"
        " more. Set TANDEM_STEP_SECONDS back to 300 (or to a step that divides it), or meter"
        " on with a new source (docs/telemetry.md, 'The metering step')"
    ]
    assert not PeriodClose.objects.exists()
    with override_settings(TANDEM_STEP_SECONDS=300):  # set back: it closes
        assert period_close(period="2026-09").created
