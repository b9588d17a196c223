"""The CSV behind every chart is safe to open in a spreadsheet."""

from __future__ import annotations

from decimal import Decimal

from dashboards.tables import csv_response


def test_it_escapes_formula_cells_and_keeps_numbers_numeric() -> None:
    response = csv_response(
        "teams.csv", ["team", "cost"], [['=HYPERLINK("http://x")', Decimal("-200.00")]]
    )
    lines = response.content.decode().splitlines()
    assert lines[0] == "team,cost"
    assert lines[1] == '"\'=HYPERLINK(""http://x"")",-200.00'
