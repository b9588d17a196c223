"""`archive_month YYYY-MM --to DIR`: write a closed month's metering partitions to DIR/YYYY-MM
(COPY files and a manifest of row counts and checksums), then detach and drop them."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.selectors import PeriodNotClosed
from billing.services import BillingError, period_archive
from metering.partitions import ArchiveError


class Command(BaseCommand):
    help = (
        "Archive a closed month: its partitions of the interval and hourly rollup tables are "
        "written to DIR/YYYY-MM with a manifest, then detached and dropped. Refuses a month "
        "that is not closed or does not verify. `verify_period --archive DIR/YYYY-MM` "
        "re-prices it from the archive."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("period", help="YYYY-MM of a closed period (the pool's time zone)")
        parser.add_argument("--to", required=True, type=Path, dest="directory")

    def handle(self, *args, period: str, directory: Path, **options) -> None:
        try:
            manifest = period_archive(period=period, directory=directory)
        except (PeriodNotClosed, BillingError, ArchiveError, ValueError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"{period}: archived to {manifest.parent} (manifest {manifest.name})")
