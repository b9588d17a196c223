"""Browser tests: Debian's Chromium, driven by Playwright, against pytest-django's live server.

Data is written before the browser starts: while Playwright's sync API runs, its event loop
occupies the test thread and Django refuses database calls from it. The live server answers
from its own thread, so the pages read the same (committed, transactional_db) rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from reports.render_pdf import CHROMIUM_ARGS, chromium_path
from tests.slow import starts

# True once plotly has drawn every chart on the page (a page without charts is fine too).
CHARTS_DRAWN_JS = """
() => Array.from(document.querySelectorAll('.plotly-graph-div')).every(
  (chart) => chart._fullLayout && chart.querySelector('svg.main-svg'))
"""


@pytest.fixture
@starts("Chromium")
def browser() -> Iterator[Browser]:
    """Chromium from Debian (never `playwright install`), headless, no sandbox, offline."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()
