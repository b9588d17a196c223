"""The metering tables' indexes: none that another index of its table begins with, so that
no write keeps an index no read needs (migrations 0015 and 0032)."""

from __future__ import annotations

import pytest
from django.db import connection

# Pairs of one table's indexes where the first is a plain index on leading columns of the
# second, with the same operator classes (a `varchar_pattern_ops` index beside a unique key
# serves LIKE, which the key cannot): every lookup the first serves, the second serves.
REDUNDANT = """
SELECT t.relname, a.indexrelid::regclass::text, b.indexrelid::regclass::text
FROM pg_index a
JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
JOIN pg_class t ON t.oid = a.indrelid
WHERE t.relnamespace = 'public'::regnamespace AND t.relname LIKE 'metering\\_%'
  AND t.relkind IN ('r', 'p') AND NOT t.relispartition
  AND NOT a.indisunique AND a.indpred IS NULL AND a.indexprs IS NULL
  AND a.indnkeyatts <= b.indnkeyatts
  AND (string_to_array(b.indkey::text, ' '))[1:a.indnkeyatts]
      = string_to_array(a.indkey::text, ' ')
  AND (string_to_array(b.indclass::text, ' '))[1:a.indnkeyatts]
      = string_to_array(a.indclass::text, ' ')
ORDER BY 1, 2
"""


@pytest.mark.django_db
def test_it_keeps_no_metering_index_that_another_index_of_its_table_begins_with() -> None:
    with connection.cursor() as cursor:
        cursor.execute(REDUNDANT)
        redundant = cursor.fetchall()

    assert redundant == []


@pytest.mark.django_db
def test_it_finds_an_index_that_another_begins_with() -> None:
    """The check above can fail: an index on a unique key's first column is reported."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX test_usagehour_task ON metering_usagehour (task_id)")
        cursor.execute(REDUNDANT)
        redundant = cursor.fetchall()

    assert redundant == [("metering_usagehour", "test_usagehour_task", "usagehour_unique")]
