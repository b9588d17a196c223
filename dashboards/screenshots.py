"""Screenshots of every dashboard page at 1440x900, for the README (`make screenshots`).

The pages are served by this process (a threaded WSGI server on a free local port, static
files included, so plotly.js comes from our own files) and opened in Debian's Chromium through
Playwright, logged in as an existing user through a session made here: no password needed.
Each page must draw its charts without a script error, or no screenshot is written for it
and the run fails, so a broken page cannot slip into the docs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.core.wsgi import get_wsgi_application
from django.db.models import Count, Sum
from django.urls import reverse
from playwright.sync_api import sync_playwright

from billing.models import PeriodClose, Statement, StatementLine
from metering.models import Task, Team
from reports.render_pdf import CHROMIUM_ARGS, chromium_path

VIEWPORT = {"width": 1440, "height": 900}
TIMEOUT_MS = 60_000
# True once plotly has drawn every chart on the page (none is fine too).
CHARTS_DRAWN_JS = """
() => Array.from(document.querySelectorAll('.plotly-graph-div')).every(
  (chart) => chart._fullLayout && chart.querySelector('svg.main-svg'))
"""


class ScreenshotError(RuntimeError):
    """A page answered with an error status or raised a script error."""


@dataclass(frozen=True)
class Shot:
    name: str
    path: str


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:  # one line per request is noise here
        pass


@contextmanager
def local_server() -> Iterator[str]:
    """Serve this Django project (and its static files) on 127.0.0.1 until the block ends."""
    server = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False)
    server.set_app(StaticFilesHandler(get_wsgi_application()))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def session_cookie(username: str, base_url: str) -> dict:
    """A logged-in session for `username`, as the cookie a browser would hold."""
    user = get_user_model().objects.get(username=username)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return {"name": settings.SESSION_COOKIE_NAME, "value": session.session_key, "url": base_url}


def pages_to_shoot() -> list[Shot]:
    """Every page, with the busiest team, its costliest task and the newest closed month."""
    shots = [
        Shot("01-overview", reverse("dashboards:overview")),
        Shot("02-utilization", reverse("dashboards:utilization")),
        Shot("03-teams", reverse("dashboards:teams")),
    ]
    team = (
        Team.objects.annotate(held=Sum("tasks__usage__alloc_gpu_seconds"))
        .filter(held__isnull=False)
        .order_by("-held")
        .first()
    )
    if team:
        shots.append(Shot("04-team", reverse("dashboards:team", args=[team.pk])))
        task = (
            Task.objects.filter(team=team)
            .annotate(events=Count("preemptions"))
            .order_by("-events", "pk")
            .first()
        )
        if task:
            shots.append(Shot("05-task", reverse("dashboards:task", args=[task.pk])))
    shots.append(Shot("06-sla", reverse("dashboards:sla")))
    shots.append(Shot("07-statements", reverse("dashboards:statements")))
    close = PeriodClose.objects.order_by("-period").first()
    if close:
        shots.append(
            Shot("08-statement-period", reverse("dashboards:statement_period", args=[close.period]))
        )
        statement = Statement.objects.filter(period_close=close).order_by("-total").first()
        if statement:
            shots.append(
                Shot(
                    "09-statement-team",
                    reverse("dashboards:statement_detail", args=[close.period, statement.team_id]),
                )
            )
            line = (
                StatementLine.objects.filter(statement=statement, kind="standard").first()
                or statement.lines.first()
            )
            if line:
                shots.append(
                    Shot("10-statement-line", reverse("dashboards:statement_line", args=[line.pk]))
                )
    shots.append(Shot("11-price-books", reverse("dashboards:price_books")))
    return shots


def take_screenshots(
    *, out: Path, username: str, names: Iterable[str] = (), log=print
) -> list[Path]:
    """Write `<name>.png` for every page (or only those in `names`), and the login page."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with local_server() as base_url:
        # Database reads first: inside sync_playwright an event loop runs in this thread, and
        # Django refuses database calls from a thread with a running loop.
        wanted = set(names)
        shots = [shot for shot in pages_to_shoot() if not wanted or shot.name in wanted]
        cookie = session_cookie(username, base_url)
        login_path = reverse("login")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_ARGS
            )
            try:
                written += _shoot_all(browser, base_url, login_path, cookie, shots, out, log)
            finally:
                browser.close()
    return written


def _shoot_all(browser, base_url, login_path, cookie, shots, out: Path, log) -> list[Path]:
    login = browser.new_page(viewport=VIEWPORT)
    login.goto(f"{base_url}{login_path}")
    written = [_save(login, out / "00-login.png", log)]
    context = browser.new_context(viewport=VIEWPORT)
    context.add_cookies([cookie])
    for shot in shots:
        written.append(_shoot(context, base_url, shot, out, log))
    return written


def _shoot(context, base_url: str, shot: Shot, out: Path, log) -> Path:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    response = page.goto(f"{base_url}{shot.path}", wait_until="load", timeout=TIMEOUT_MS)
    if response is None or response.status != 200:
        raise ScreenshotError(f"{shot.path} answered {response.status if response else 'nothing'}")
    page.wait_for_function(CHARTS_DRAWN_JS, timeout=TIMEOUT_MS)
    if errors:
        raise ScreenshotError(f"{shot.path}: script errors: {errors}")
    path = _save(page, out / f"{shot.name}.png", log)
    page.close()
    return path


def _save(page, path: Path, log) -> Path:
    page.screenshot(path=str(path), full_page=False)
    log(f"wrote {path}")
    return path
