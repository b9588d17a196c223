"""CSV cells are safe in a spreadsheet: formulas escaped, numbers kept numeric."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest

from reports.render_csv import cell_text, csv_bytes, escape_text


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('=HYPERLINK("http://evil.example/","x")', '\'=HYPERLINK("http://evil.example/","x")'),
        ("+1+2", "'+1+2"),
        ("-2+3", "'-2+3"),
        ("-200.00", "'-200.00"),  # text that merely looks like a number is still text
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("  =1+1", "'  =1+1"),  # leading blanks do not hide a formula
        ("\uff1d1+1", "'\uff1d1+1"),  # full-width equals sign
        ("search-api", "search-api"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_it_escapes_text_that_could_start_a_formula(text: str, written: str) -> None:
    assert escape_text(text) == written


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (Decimal("-200.00"), "-200.00"),
        (Decimal("-0.00"), "0.00"),
        (Decimal("1E+3"), "1000"),
        (Decimal("0.000001"), "0.000001"),
        (42, "42"),
        (None, ""),
        (True, "true"),
        (
            dt.datetime(2026, 10, 1, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=8))),
            "2026-09-30T16:00:00Z",
        ),
    ],
)
def test_it_keeps_typed_numbers_numeric_and_instants_in_utc(value, written: str) -> None:
    assert cell_text(value) == written


@pytest.mark.parametrize("value", [1.5, Decimal("NaN"), dt.datetime(2026, 10, 1)])
def test_it_refuses_floats_nan_and_naive_times(value) -> None:
    with pytest.raises((TypeError, ValueError)):
        cell_text(value)


def test_it_writes_a_file_a_csv_reader_reads_back() -> None:
    data = csv_bytes(
        ["team", "amount", "note"],
        [["=cmd", Decimal("-12.50"), 'quote " and, comma\nnewline']],
    )
    assert data.endswith(b"\r\n")
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    assert rows == [["team", "amount", "note"], ["'=cmd", "-12.50", 'quote " and, comma\nnewline']]


def test_it_refuses_a_row_of_the_wrong_width() -> None:
    with pytest.raises(ValueError, match="2 cells"):
        csv_bytes(["a", "b", "c"], [["x", "y"]])
