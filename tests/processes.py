"""What a process the tests start (a Celery worker, beat, the demo) is handed: the test
database's real connection and the test session's private Redis.

One helper for every such process, so none of them rebuilds a URL by hand. The embedded
PostgreSQL (pgserver) listens on a Unix socket only, which `dj_database_url` keeps in
OPTIONS["host"], not in HOST: a URL rebuilt from HOST and PORT alone points a worker at another
server (or at none).
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlencode

from simulator.prometheus import die_with_parent

__all__ = ["child_environment", "database_url", "die_with_parent"]

# PostgreSQL options that settings.py sets itself in every process; not part of the address.
SETTINGS_OWN_OPTIONS = {"options"}


def database_url() -> str:
    """The URL of the database this test process is connected to (pytest-django's test
    database), socket or TCP, for a child process's DATABASE_URL."""
    from django.db import connection

    return database_url_of(connection.settings_dict)


def database_url_of(settings_dict: dict) -> str:
    options = {
        key: value
        for key, value in (settings_dict.get("OPTIONS") or {}).items()
        if key not in SETTINGS_OWN_OPTIONS
    }
    host = settings_dict.get("HOST") or ""
    if host.startswith("/"):
        # A socket directory: kept as a query parameter, which keeps its case (a URL's host
        # part is lower-cased by every parser).
        options.setdefault("host", host)
        host = ""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = settings_dict.get("PASSWORD") or ""
    credentials = f"{user}:{quote(password, safe='')}@" if password else f"{user}@"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    query = f"?{urlencode(options)}" if options else ""
    return f"postgres://{credentials}{host}{port}/{quote(settings_dict['NAME'], safe='')}{query}"


def child_environment(**overrides: str) -> dict[str, str]:
    """The environment for a process a test starts: this process's (its private broker
    included) with the test database's URL."""
    return {**os.environ, "DATABASE_URL": database_url(), **overrides}
