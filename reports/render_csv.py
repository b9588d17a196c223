"""CSV files that are safe to open in a spreadsheet.

Formula injection (OWASP "CSV Injection"): a spreadsheet runs a cell that begins with `=`, `+`,
`-`, `@`, a tab or a carriage return as a formula, so a team or task named `=HYPERLINK(...)`
could act on the reader's machine. The rule here:

- A cell that holds a *typed number* (`Decimal` or `int`, never a float: money is Decimal) is
  written as a plain number, e.g. `-200.00`. A number is not a formula, and finance needs
  credits to stay numeric so that columns sum.
- Every *text* cell whose first non-blank character is one of the triggers (or its full-width
  twin, which some spreadsheets also accept) gets a leading single quote: `'=HYPERLINK(...)`.
  This is deliberately strict: a text cell such as "-200.00" or "-5 GPU-hours" is escaped too,
  because only values we typed as numbers are trusted to be numbers.

Report files and the dashboards' chart downloads are written by the same `csv_write`, so the
rule is the same in every CSV Tandem hands out.

Quoting of commas, quotes and newlines is left to the csv module (RFC 4180, QUOTE_MINIMAL).
Files are UTF-8 without a byte order mark, with CRLF line ends (RFC 4180).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

FORMULA_TRIGGERS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")  # and their full-width twins
ESCAPE_PREFIX = "'"

Cell = str | Decimal | int | dt.datetime | None


def format_decimal(value: Decimal) -> str:
    """A plain decimal: no exponent, no '+', no thousands separator, no negative zero."""
    if not value.is_finite():
        raise ValueError(f"cannot write {value!r} as a number")
    if value.is_zero():
        value = abs(value)
    return format(value, "f")


def format_instant(value: dt.datetime) -> str:
    """ISO 8601 in UTC with a `Z`, to the second: 2026-10-01T00:00:00Z."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: every instant must carry its zone")
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def escape_text(value: str) -> str:
    """`value` made inert for spreadsheets: prefixed with ' when it could start a formula."""
    stripped = value.lstrip(" \n")
    if value and (value[0] in FORMULA_TRIGGERS or (stripped and stripped[0] in FORMULA_TRIGGERS)):
        return ESCAPE_PREFIX + value
    return value


def cell_text(value: Cell) -> str:
    """The text written for one cell. None is an empty cell (FOCUS null)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        # bool is an int subclass; a flag is text, not the number 0/1.
        return "true" if value else "false"
    if isinstance(value, float):
        raise TypeError("floats are not written: pass a Decimal")
    if isinstance(value, Decimal):
        return format_decimal(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.datetime):
        return format_instant(value)
    if isinstance(value, str):
        return escape_text(value)
    raise TypeError(f"unsupported cell type {type(value).__name__}")


def csv_write(
    stream: SupportsWrite[str], header: Sequence[str], rows: Iterable[Sequence[Cell]]
) -> None:
    """Header, then rows, every cell passed through `cell_text`, written to `stream`.

    The one CSV writer: report files and the dashboards' chart downloads both use it, so a
    credit is a number and a hostile name is inert in every file Tandem hands out.
    """
    writer = csv.writer(stream, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow([escape_text(name) for name in header])
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells, header has {len(header)}: {row!r}")
        writer.writerow([cell_text(value) for value in row])


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Cell]]) -> bytes:
    """A whole CSV file, UTF-8 (see `csv_write`)."""
    buffer = io.StringIO()
    csv_write(buffer, header, rows)
    return buffer.getvalue().encode("utf-8")
