"""Print the management report page to PDF with headless Chromium (Playwright).

The PDF is the very HTML page people open at /reports/<YYYY-MM>/, rendered server-side to a
string, so it works inside a Celery worker with no web server running. Chromium loads it from
an address that never reaches the network: every request is answered here, the page itself
from the string and `/static/...` from Django's static files finders (plotly.js included),
and anything else is refused. Then we wait until plotly has drawn every chart and print.

Chromium is Debian's (`/usr/bin/chromium`); Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.contrib.staticfiles import finders
from playwright.sync_api import Route, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# A host name that cannot resolve (RFC 6761 reserves .invalid): nothing leaves the machine.
PAGE_ORIGIN = "http://tandem-report.invalid"
# A4 portrait minus 12 mm margins is 186 mm = 703 CSS pixels: lay the page out at the printed
# width, so plotly sizes each chart to the paper instead of a wider screen.
PRINT_WIDTH_PX = 703
PRINT_MARGIN = "12mm"
CHARTS_DRAWN_JS = """
() => Array.from(document.querySelectorAll('.plotly-graph-div')).every(
  (chart) => chart._fullLayout && chart.querySelector('svg.main-svg'))
"""
TIMEOUT_MS = 60_000


class PdfRenderError(RuntimeError):
    """Chromium could not print the page (a script error, a chart that never drew)."""


def chromium_path() -> str:
    return "/usr/bin/chromium"  # Debian's package (make installs it)


def _static_file(url_path: str) -> Path | None:
    relative = unquote(url_path.removeprefix(settings.STATIC_URL))
    found = finders.find(relative)
    return Path(found) if found else None


def _answer(route: Route, *, page_path: str, html: str) -> None:
    """Serve the page and static files from this process; refuse everything else."""
    url = urlsplit(route.request.url)
    if f"{url.scheme}://{url.netloc}" != PAGE_ORIGIN:
        route.abort("blockedbyclient")
    elif url.path == page_path:
        route.fulfill(status=200, content_type="text/html; charset=utf-8", body=html)
    elif url.path.startswith(settings.STATIC_URL) and (found := _static_file(url.path)):
        content_type = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
        route.fulfill(status=200, content_type=content_type, body=found.read_bytes())
    else:
        route.fulfill(status=404, content_type="text/plain", body="not found")


def html_to_pdf(html: str, *, page_path: str = "/report/") -> bytes:
    """Print `html` (a whole page, as served at `page_path`) to an A4 PDF, charts drawn."""
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": PRINT_WIDTH_PX, "height": 1000})
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.route("**/*", lambda route: _answer(route, page_path=page_path, html=html))
            page.emulate_media(media="print")
            page.goto(PAGE_ORIGIN + page_path, wait_until="load", timeout=TIMEOUT_MS)
            try:
                page.wait_for_function(CHARTS_DRAWN_JS, timeout=TIMEOUT_MS)
            except PlaywrightTimeout:
                raise PdfRenderError(f"charts did not draw; page errors: {errors}") from None
            if errors:
                raise PdfRenderError(f"the report page raised script errors: {errors}")
            return page.pdf(
                format="A4",
                print_background=True,
                margin={side: PRINT_MARGIN for side in ("top", "right", "bottom", "left")},
            )
        finally:
            browser.close()
