"""The table behind every chart: columns that know how to show and how to export a value.

A chart's rows stay raw (Decimal, datetime, text). The page shows them formatted (thousands
separators, units), the CSV writes them plainly (no separators, fixed places, ISO times in the
pool's zone), so a spreadsheet reads the same numbers the page shows. Long series are not
inlined as HTML tables (a month of five-minute intervals is 8,640 rows): the page links the CSV.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.http import HttpResponse

from dashboards.filters import pool_zone
from kernel.money import ROUNDING
from reports import charts, formatting
from reports.render_csv import Cell, csv_write

# Beyond this many rows the page shows a link to the CSV instead of the table.
MAX_TABLE_ROWS = 200


@dataclass(frozen=True)
class Column:
    title: str
    display: Callable[[Any], str] = str
    places: int | None = None  # a number: right-aligned, exported with this many places
    scale: int = 1  # exported value = value x scale (ratios are exported as percentages)

    @property
    def numeric(self) -> bool:
        return self.places is not None

    def export(self, value: Any) -> Cell:
        """The value as the CSV cell it becomes: a number stays a typed number (a credit must
        sum in a spreadsheet), a time is local ISO text, anything else is text (escaped)."""
        if value is None:
            return None
        if isinstance(value, dt.datetime):
            return value.astimezone(pool_zone()).isoformat()
        if self.places is not None:
            exact = Decimal(str(value)) * self.scale
            return exact.quantize(Decimal(1).scaleb(-self.places), ROUNDING)
        if isinstance(value, Decimal | int) and not isinstance(value, bool):
            return value
        return str(value)


def text(title: str) -> Column:
    return Column(title, display=lambda value: formatting.DASH if value is None else str(value))


def moment(title: str) -> Column:
    return Column(title, display=lambda value: formatting.local(value, pool_zone()))


def quantity(title: str, places: int = 2) -> Column:
    return Column(title, display=lambda value: formatting.number(value, places), places=places)


def amount(title: str) -> Column:
    return Column(title, display=formatting.money, places=2)


def share(title: str) -> Column:
    return Column(title, display=formatting.percent, places=2, scale=100)


def seconds(title: str) -> Column:
    return Column(title, display=formatting.duration, places=0)


@dataclass
class Chart:
    """A figure and the table behind it: every chart can also be read, and exported, as numbers."""

    slug: str
    html: str
    columns: list[Column]
    rows: list[Sequence[Any]]
    csv_url: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def headers(self) -> list[str]:
        return [column.title for column in self.columns]

    @property
    def numeric_columns(self) -> set[int]:
        return {i for i, column in enumerate(self.columns) if column.numeric}

    @property
    def inline(self) -> bool:
        return len(self.rows) <= MAX_TABLE_ROWS

    @property
    def display_rows(self) -> list[list[str]]:
        if not self.inline:
            return []
        return [
            [column.display(value) for column, value in zip(self.columns, row, strict=True)]
            for row in self.rows
        ]

    def csv_response(self, filename: str) -> HttpResponse:
        return csv_response(
            filename,
            self.headers,
            (
                [column.export(value) for column, value in zip(self.columns, row, strict=True)]
                for row in self.rows
            ),
        )


def make_chart(
    slug: str, figure: object, columns: Sequence[Column], rows: Iterable[Sequence[Any]]
) -> Chart:
    return Chart(slug=slug, html=charts.to_html(figure), columns=list(columns), rows=list(rows))


def csv_response(
    filename: str, headers: Sequence[str], rows: Iterable[Sequence[Cell]]
) -> HttpResponse:
    """A CSV download written by the reports' writer: names from Prometheus labels (a team
    called "=HYPERLINK(...)") stay inert text, Decimal amounts stay numbers."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    csv_write(response, headers, rows)
    return response


def find_charts(context: dict) -> dict[str, Chart]:
    """Every chart in a page's context, also inside lists and dicts one level down."""
    found: dict[str, Chart] = {}

    def visit(value: object, depth: int) -> None:
        if isinstance(value, Chart):
            found[value.slug] = value
        elif depth < 2 and isinstance(value, dict):
            for inner in value.values():
                visit(inner, depth + 1)
        elif depth < 2 and isinstance(value, list | tuple):
            for inner in value:
                visit(inner, depth + 1)

    for value in context.values():
        visit(value, 0)
    return found
