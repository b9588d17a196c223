"""`manage.py usage_report --start ISO --end ISO --group-by team|task|kind [--format json|csv]`.

The CSV goes through the one CSV writer (`reports.render_csv`): numbers stay numbers and a
team or task name that could start a spreadsheet formula is made inert, as in every file
Tandem hands out.
"""

from __future__ import annotations

import json
from decimal import Decimal

from django.core.management.base import BaseCommand

from metering import selectors
from metering.management.commands._arguments import period
from reports.render_csv import Cell, csv_write
from reports.selectors import price_book_terms

CSV_COLUMNS = (
    "group",
    "tasks",
    "alloc_gpu_hours",
    "busy_gpu_hours",
    "peak_memory_bytes",
    "io_operations",
    "preemptions",
    "mean_wait_seconds",
)


class Command(BaseCommand):
    help = "Usage per team, task or kind between --start and --end (JSON or CSV)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--start", required=True, help="ISO 8601 with zone")
        parser.add_argument("--end", required=True, help="ISO 8601 with zone")
        parser.add_argument("--group-by", required=True, choices=sorted(selectors.GROUP_BY))
        parser.add_argument("--format", default="json", choices=["json", "csv"])

    def handle(self, *args, **options) -> None:
        start, end = period(options["start"], options["end"])
        report = selectors.usage_report(
            start=start,
            end=end,
            group_by=options["group_by"],
            min_requests=price_book_terms(start).sla_min_requests,
        )
        if options["format"] == "json":
            self.stdout.write(json.dumps(report, indent=2))
            return
        head = [
            report["start"],
            report["end"],
            _number(report["capacity_gpu_hours"]),
            _number(report["completeness"]),
        ]
        csv_write(
            self.stdout,
            ["start", "end", "capacity_gpu_hours", "completeness", *CSV_COLUMNS],
            (
                [*head, group["group"], *(_number(group[c]) for c in CSV_COLUMNS[1:])]
                for group in report["groups"]
            ),
        )


def _number(value: object) -> Cell:
    """A figure of the report as a number cell (Decimal or int); None stays an empty cell."""
    if value is None or isinstance(value, int):
        return value
    return Decimal(str(value))
