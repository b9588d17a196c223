"""The overview answers "Is sharing paying off?" on data built like the demo's (issue 15).

A small version of what `make demo` builds: the demo's own two months (the earlier on
separate pools, the later shared), 8 GPUs and two days of each, simulated, back-filled into a
real Prometheus and ingested; then a finance user opens the overview in Chromium.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from billing import services as billing_services
from config.demo import DEMO_SCRAPE_SECONDS, demo_months
from metering import services as metering_services
from metering.models import Source
from simulator.pool import simulate
from simulator.prometheus import backfill_parts
from tests.dashboards.conftest import make_user
from tests.e2e.conftest import CHARTS_DRAWN_JS
from tests.metering.conftest import ingest_span, pool_span, prometheus_over

# Every test here starts Prometheus, a Celery worker or Chromium (tests/slow.py).
pytestmark = pytest.mark.slow

# The demo started on this day shows November 2026 (shared) against October 2026 (separate).
DEMO_DAY = dt.date(2026, 12, 1)
VIEWPORT = {"width": 1440, "height": 900}


@pytest.fixture
def demo_like_site(transactional_db, live_server, tmp_path: Path) -> str:
    billing_services.price_book_ensure_default()
    months = demo_months(DEMO_DAY, gpus=8, days=2)
    truths = []
    for month in months:
        result = simulate(month.config, tmp_path / month.label)
        truths.append(json.loads(result.truth_path.read_text()))
    tsdb = tmp_path / "tsdb"
    backfill_parts([tmp_path / month.label / "metrics.om" for month in months], tsdb)
    prometheus = prometheus_over(tsdb, DEMO_SCRAPE_SECONDS)
    try:
        source = Source.objects.create(
            name="default", url=prometheus.url, scrape_interval_seconds=DEMO_SCRAPE_SECONDS
        )
        for truth in truths:
            ingest_span(source, *pool_span(truth), batch=288)
    finally:
        prometheus.stop()
    for name, service in truths[-1]["services"].items():
        metering_services.service_slo_set(external_id=name, slo_p99_ms=service["slo_p99_ms"])
    make_user("fiona", "finance", password=True)
    return live_server.url


def test_it_shows_a_verdict_on_the_demos_two_months(demo_like_site: str, browser: Browser) -> None:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{demo_like_site}/")
    page.fill("#id_username", "fiona")
    page.fill("#id_password", "fiona-password")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    page.wait_for_function(CHARTS_DRAWN_JS)

    subtitle = page.locator(".subtitle").inner_text()
    assert subtitle == "November 2026 compared with October 2026"
    utilization = page.locator('[data-card="1"]').inner_text()
    assert "October 2026: \u2013" not in utilization  # the "before" figure is there
    verdict = page.locator(".card.verdict")
    label = verdict.locator("strong").inner_text()
    assert label in {"Sharing works", "Isolation is insufficient", "Not complementary", "Mixed"}
    assert "Not enough data" not in verdict.inner_text()
    assert "insufficient_data" not in (verdict.get_attribute("class") or "")
