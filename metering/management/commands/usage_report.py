"""`manage.py usage_report --start ISO --end ISO --group-by team|task|kind [--format json|csv]`."""

from __future__ import annotations

import csv
import json

from django.core.management.base import BaseCommand

from metering import selectors
from metering.management.commands._arguments import period

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
        report = selectors.usage_report(start=start, end=end, group_by=options["group_by"])
        if options["format"] == "json":
            self.stdout.write(json.dumps(report, indent=2))
            return
        writer = csv.writer(self.stdout, lineterminator="\n")
        writer.writerow(["start", "end", "capacity_gpu_hours", "completeness", *CSV_COLUMNS])
        head = [
            report["start"],
            report["end"],
            report["capacity_gpu_hours"],
            report["completeness"],
        ]
        for group in report["groups"]:
            writer.writerow([*head, *("" if group[c] is None else group[c] for c in CSV_COLUMNS)])
