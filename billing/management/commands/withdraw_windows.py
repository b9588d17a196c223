"""`manage.py withdraw_windows --source NAME --start ISO --end ISO --reason TEXT`: take back the
windows of a disabled source that should never have metered the span, and all they wrote
(docs/telemetry.md, "One GPU, two sources")."""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from billing.models import PeriodClose
from billing.selectors import closed_period_bounds, periods_archived
from kernel.period import next_period
from metering import selectors, services
from metering.management.commands._arguments import period


class Command(BaseCommand):
    help = (
        "Take back a disabled source's ingest windows over a span, with every row they wrote"
        " (audited): a copy of another source, which should never have metered the span."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--source", required=True, help="source name")
        parser.add_argument("--start", required=True, help="ISO 8601 with zone")
        parser.add_argument("--end", required=True, help="ISO 8601 with zone")
        parser.add_argument("--reason", required=True, help="why these windows go (audited)")

    def handle(self, *args, **options) -> None:
        start, end = period(options["start"], options["end"])
        try:
            source = selectors.source_get(name=options["source"])
            withdrawn = services.windows_withdraw(
                source=source,
                start=start,
                end=end,
                operator=f"{getpass.getuser()} (manage.py withdraw_windows)",
                reason=options["reason"],
            )
        except (selectors.UnknownSource, services.WindowError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"took back {withdrawn.windows} windows of {source.name} from"
            f" {withdrawn.start:%Y-%m-%dT%H:%M:%SZ} to {withdrawn.end:%Y-%m-%dT%H:%M:%SZ}"
            f" and the {withdrawn.rows} rows they wrote"
        )
        # Each closed month on the bounds it was priced on (the zone may have changed since).
        bounds = {
            close.period: closed_period_bounds(close)
            for close in PeriodClose.objects.order_by("period")
        }
        touched = [
            month
            for month, span in bounds.items()
            if span.start < withdrawn.end and span.end > withdrawn.start
        ]
        archived = periods_archived(touched)
        if archived:
            self.stdout.write(
                f"closed months touched whose metering is archived: {', '.join(sorted(archived))};"
                " their statements stand, and no correction can be drawn from them"
            )
        touched = [period for period in touched if period not in archived]
        if touched:
            # The first month not closed yet: closing a closed one does nothing.
            following = next_period(list(bounds)[-1])
            rechecks = " ".join(f"--recheck {month}" for month in touched)
            self.stdout.write(
                f"closed months touched: {', '.join(touched)}; their statements stand until a"
                f" later close corrects them (close_period --period {following} {rechecks})"
            )
