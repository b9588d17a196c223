"""`verify_period --period YYYY-MM [--archive DIR]`: re-price a closed period; fail on any
difference. With `--archive`, the metering of an archived month is read from its archive."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.selectors import PeriodNotClosed, period_verification
from metering.partitions import ArchiveError


class Command(BaseCommand):
    help = (
        "Re-price a closed period's stored scenario and compare with its statements, and "
        "check that the metering rows still hash to the scenario priced. Exits non-zero on "
        "any difference."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="YYYY-MM of a closed period")
        parser.add_argument(
            "--archive",
            type=Path,
            help="the month's folder written by archive_month (DIR/YYYY-MM): read its"
            " metering from there, the month's partitions having been archived",
        )

    def handle(self, *args, period: str, archive: Path | None, **options):
        try:
            verification = period_verification(period, archive=archive)
        except (PeriodNotClosed, ArchiveError, ValueError) as error:
            raise CommandError(str(error)) from None
        for note in verification.notes:
            self.stdout.write(f"note: {note}")
        if not verification.ok:
            for difference in verification.differences:
                self.stdout.write(f"DIFFERENCE: {difference}")
            raise CommandError(f"{period}: {len(verification.differences)} difference(s)")
        self.stdout.write(f"{period}: no difference")
