"""`export_scenario --period YYYY-MM [--out FILE]`: the exact engine input behind a period."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.selectors import PeriodNotClosed, period_scenario_text


class Command(BaseCommand):
    help = "Write the scenario (canonical JSON) a closed period was priced from."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="YYYY-MM of a closed period")
        parser.add_argument("--out", help="file to write (default: standard output)")
        parser.add_argument(
            "--revision",
            type=int,
            help="a later revision (late data priced as corrections); default: the close's",
        )

    def handle(self, *args, period: str, out: str | None, revision: int | None, **options):
        try:
            text = period_scenario_text(period, revision)
        except (PeriodNotClosed, ValueError) as error:
            raise CommandError(str(error)) from None
        if out:
            Path(out).write_text(text)
            self.stderr.write(f"wrote the scenario of {period} to {out}")
        else:
            self.stdout.write(text)
