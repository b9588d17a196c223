"""`python manage.py price_scenario FILE`: price a scenario file and print the result JSON."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from billing.pricing import ScenarioError, price, result_to_dict, scenario_from_dict


class Command(BaseCommand):
    help = "Price a scenario file (docs/pricing.md) with the pricing engine and print the result."
    # Pure computation on a file: no database, URLs or models to check first.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="scenario JSON file")

    def handle(self, *args, **options) -> None:
        path = options["file"]
        try:
            with open(path, encoding="utf-8") as handle:
                # Floats stay floats here so that the engine can refuse them where money is
                # required.
                data = json.load(handle)
        except OSError as error:
            raise CommandError(f"{path}: cannot read the file: {error.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CommandError(f"{path}: not valid JSON: {error}") from None
        try:
            result = price(scenario_from_dict(data))
        except ScenarioError as error:
            raise CommandError(f"{path}: {error}") from None
        self.stdout.write(json.dumps(result_to_dict(result), indent=2))
