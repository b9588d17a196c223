"""Remember a page's expensive reads until the data under them changes.

A month of a 1,000-GPU pool is about 4 million usage rows: summing them takes PostgreSQL
seconds, however well the query is written, and the pages ask for the same sums again and
again between two ingest windows. So the heavy reads are kept in Django's cache under a key
made of their arguments and a *fingerprint* of the data: the newest row id of every metered
table, the newest change and number of ingest windows, and the newest close and price book.
Any ingest (new rows, or a re-ingested window, whose `updated` moves), any close and any new
price book changes the fingerprint, so a cached answer is never older than the data. The
fingerprint is one query of index lookups (a few milliseconds).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.core.cache import cache
from django.db import connection
from django.db.models import Model, QuerySet

T = TypeVar("T")
TIMEOUT_SECONDS = 6 * 3600
# Part of every key: raise it when the shape of what is remembered changes (a field added to
# a cached dataclass), so that a deploy never unpickles an answer of the old shape.
SHAPE_VERSION = 2
_MISSING = object()

FINGERPRINT_SQL = """
SELECT (SELECT max(id) FROM metering_usageinterval),
       (SELECT max(id) FROM metering_capacityinterval),
       (SELECT max(id) FROM metering_latencyinterval),
       (SELECT max(id) FROM metering_preemption),
       (SELECT max(id) FROM metering_podwait),
       (SELECT max(id) FROM metering_task),
       (SELECT string_agg(id || ':' || slo_p99_ms || ':' || is_key, ',' ORDER BY id)
          FROM metering_service),
       (SELECT max(updated) FROM metering_ingestwindow),
       (SELECT count(*) FROM metering_ingestwindow),
       (SELECT max(id) FROM billing_periodclose),
       (SELECT max(id) FROM billing_pricebook),
       (SELECT max(published_at) FROM billing_pricebook)
"""


def data_fingerprint() -> str:
    with connection.cursor() as cursor:
        cursor.execute(FINGERPRINT_SQL)
        row = cursor.fetchone()
    # The database name too: two databases (tests, the demo) never share an answer.
    return hashlib.sha256(repr((connection.settings_dict["NAME"], row)).encode()).hexdigest()


def key_part(value: object) -> object:
    """A stable, hashable stand-in for an argument (a queryset becomes its sorted ids)."""
    if isinstance(value, QuerySet):
        return ("ids", tuple(sorted(value.values_list("pk", flat=True))))
    if isinstance(value, Model):
        return (type(value).__name__, value.pk)
    if isinstance(value, list | tuple):
        return tuple(key_part(item) for item in value)
    return value


def remembered(name: str, compute: Callable[[], T], *arguments: object) -> T:
    """`compute()`, or its answer from the cache while the data has not changed since."""
    parts: Iterable[object] = (
        name,
        SHAPE_VERSION,
        data_fingerprint(),
        *(key_part(a) for a in arguments),
    )
    key = "tandem:dashboards:" + hashlib.sha256(repr(tuple(parts)).encode()).hexdigest()
    found = cache.get(key, _MISSING)
    if found is _MISSING:
        found = compute()
        cache.set(key, found, TIMEOUT_SECONDS)
    return found
