"""`verify_period --period YYYY-MM`: re-price a closed period; fail on any difference."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.selectors import PeriodNotClosed, period_verification


class Command(BaseCommand):
    help = (
        "Re-price a closed period's stored scenario and compare with its statements, and "
        "check that the metering rows still hash to the scenario priced. Exits non-zero on "
        "any difference."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="YYYY-MM of a closed period")

    def handle(self, *args, period: str, **options):
        try:
            verification = period_verification(period)
        except (PeriodNotClosed, ValueError) as error:
            raise CommandError(str(error)) from None
        for note in verification.notes:
            self.stdout.write(f"note: {note}")
        if not verification.ok:
            for difference in verification.differences:
                self.stdout.write(f"DIFFERENCE: {difference}")
            raise CommandError(f"{period}: {len(verification.differences)} difference(s)")
        self.stdout.write(f"{period}: no difference")
