"""`whatif_period --period YYYY-MM --price-book VERSION`: a closed month under another book."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from billing.models import PriceBook
from billing.selectors import PeriodNotClosed, PriceBookNotFound, WhatIfAmount, period_whatif


class Command(BaseCommand):
    help = "Price a closed month with another (e.g. draft) price book; stores nothing."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="YYYY-MM of a closed period")
        parser.add_argument("--price-book", required=True, type=int, help="book version")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print JSON")

    def handle(self, *args, period: str, price_book: int, as_json: bool, **options):
        book = PriceBook.objects.filter(version=price_book).first()
        if book is None:
            raise CommandError(f"--price-book: no price book version {price_book}")
        try:
            what_if = period_whatif(period=period, price_book_id=book.pk)
        except (PeriodNotClosed, PriceBookNotFound, ValueError) as error:
            raise CommandError(str(error)) from None
        if as_json:
            self.stdout.write(_json(what_if))
            return
        self.stdout.write(
            f"{period}: statement (book v{what_if.statement_price_book_version}) -> "
            f"what-if (book v{what_if.what_if_price_book_version}), {what_if.currency}"
        )
        self.stdout.write(_row("pool cost", what_if.pool_cost))
        for team in what_if.teams:
            self.stdout.write(_row(team.team, team.total))
            for kind, amount in team.lines.items():
                self.stdout.write(_row(f"  {kind}", amount))
        self.stdout.write(_row("platform", what_if.platform_total))


def _row(label: str, amount: WhatIfAmount) -> str:
    return f"{label:<24}{amount.statement:>14}{amount.what_if:>14}{amount.difference:>+14}"


def _json(what_if) -> str:
    def figures(amount: WhatIfAmount) -> dict[str, str]:
        return {
            "statement": str(amount.statement),
            "what_if": str(amount.what_if),
            "difference": str(amount.difference),
        }

    return json.dumps(
        {
            "period": what_if.period,
            "statement_price_book_version": what_if.statement_price_book_version,
            "what_if_price_book_version": what_if.what_if_price_book_version,
            "currency": what_if.currency,
            "pool_cost": figures(what_if.pool_cost),
            "platform_total": figures(what_if.platform_total),
            "teams": {
                team.team: {
                    "total": figures(team.total),
                    "lines": {kind: figures(amount) for kind, amount in team.lines.items()},
                }
                for team in what_if.teams
            },
        },
        indent=2,
    )
