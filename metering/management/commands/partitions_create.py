"""`partitions_create [--months-ahead N] [--month YYYY-MM]`: create missing monthly partitions."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from metering import partitions


class Command(BaseCommand):
    help = (
        "Create the interval tables' monthly partitions of this month and the months ahead "
        "(TANDEM_PARTITION_MONTHS_AHEAD, as beat does daily), or of one month; idempotent."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--months-ahead", type=int, dest="months_ahead")
        parser.add_argument("--month", help="YYYY-MM: create this month's partitions only")

    def handle(self, *args, months_ahead: int | None, month: str | None, **options) -> None:
        if months_ahead is not None and not 0 <= months_ahead <= 120:
            raise CommandError("--months-ahead: give a number of months from 0 to 120")
        try:
            if month:
                created = partitions.month_partitions_ensure(partitions.month_of(month))
            else:
                created = partitions.partitions_ensure(months_ahead=months_ahead)
        except ValueError as error:
            raise CommandError(f"--month: {error}") from None
        for name in created:
            self.stdout.write(f"created {name}")
        self.stdout.write(f"{len(created)} partition(s) created")
