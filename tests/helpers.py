"""Helpers shared by the tests (not fixtures)."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing import models

# Every model a close writes, for "nothing changed" and "nothing stored" comparisons.
CLOSE_MODELS = [
    models.PeriodClose,
    models.PeriodScenario,
    models.Statement,
    models.StatementLine,
    models.StatementLineTask,
    models.StatementLineClass,
    models.StatementLineTaskClass,
    models.PlatformLine,
    models.PlatformLineClass,
    models.SlaBreach,
]


def billing_rows() -> dict[str, list[tuple]]:
    """Every row a close writes, as text values, per model."""
    return {
        model.__name__: sorted(
            tuple(str(value) for value in row) for row in model.objects.values_list()
        )
        for model in CLOSE_MODELS
    }


def run_sql(sql: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])


def command_output(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def exported_and_repriced(period: str, tmp_path: Path) -> dict:
    """export_scenario --period, then price_scenario on the file: the engine's JSON output."""
    scenario_file = tmp_path / f"{period}.json"
    call_command("export_scenario", "--period", period, "--out", str(scenario_file),
                 stderr=io.StringIO())  # fmt: skip
    return json.loads(command_output("price_scenario", str(scenario_file)))


# src= and href= values a browser would fetch or follow: scripts, styles, images, links.
_ASSET_URL = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
# A scheme then "//", or a protocol-relative "//": either leaves the site.
_OFF_SITE = re.compile(r"([a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


def off_site_urls(html: str) -> list[str]:
    """The src/href values of a page that leave the site (a CDN, another host).

    Tests look at URLs, not for the text "cdn": a random CSRF token holds "cdn" now and then.
    """
    return [url for url in _ASSET_URL.findall(html) if _OFF_SITE.match(url)]


@contextmanager
def http_served(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` serving on a free port of 127.0.0.1 in a thread; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def migrate_to(target: list[tuple[str, str]] | None = None) -> None:
    """The test database migrated to `target` (app, migration) pairs, else to the latest: a
    migration's test writes rows as an older schema held them, then migrates them forward."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target or executor.loader.graph.leaf_nodes())


def interval_starts(first: dt.datetime, end: dt.datetime, step: dt.timedelta) -> list[dt.datetime]:
    """The starts of the intervals of `step` from `first` up to `end` (excluded)."""
    return [first + step * n for n in range(-(-(end - first) // step))]
