"""The CSV behind every chart is safe to open in a spreadsheet."""

from __future__ import annotations

from decimal import Decimal

from dashboards.tables import Chart, amount, csv_response, seconds, share, text
from reports.render_csv import csv_bytes


def test_it_escapes_formula_cells_and_keeps_numbers_numeric() -> None:
    response = csv_response(
        "teams.csv", ["team", "cost"], [['=HYPERLINK("http://x")', Decimal("-200.00")]]
    )
    lines = response.content.decode().splitlines()
    assert lines[0] == "team,cost"
    assert lines[1] == '"\'=HYPERLINK(""http://x"")",-200.00'


def test_it_writes_chart_amounts_as_numbers_and_escapes_text_that_looks_like_one() -> None:
    chart = Chart(
        slug="cost",
        html="",
        columns=[text("Team"), amount("Amount"), share("Share"), seconds("Wait")],
        rows=[
            ["=cmd|' /C calc'!A0", Decimal("-200.00"), Decimal("-0.125"), -3],
            ["-5 GPU-hours", Decimal("12.5"), Decimal("0.5"), Decimal("7")],
        ],
    )
    lines = chart.csv_response("cost.csv").content.decode().splitlines()
    assert lines == [
        "Team,Amount,Share,Wait",
        "'=cmd|' /C calc'!A0,-200.00,-12.50,-3",
        "'-5 GPU-hours,12.50,50.00,7",
    ]


def test_it_writes_chart_downloads_with_the_report_files_writer() -> None:
    header = ["team", "amount", "when"]
    rows = [["@evil", Decimal("-1.50"), "2026-10-01T08:00:00+08:00"], ["ok", 3, None]]
    assert csv_response("x.csv", header, rows).content == csv_bytes(header, rows)
