from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from dashboards.screenshots import ScreenshotError, take_screenshots


class Command(BaseCommand):
    help = "Write a 1440x900 screenshot of every dashboard page into --out (docs/screenshots)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", default="docs/screenshots")
        parser.add_argument("--username", default="demo", help="an existing user with a role")
        parser.add_argument(
            "--page", action="append", default=[], help="only this page, e.g. 01-overview"
        )

    def handle(self, *args, out: str, username: str, page: list[str], **options) -> None:
        try:
            take_screenshots(out=Path(out), username=username, names=page, log=self.stdout.write)
        except ScreenshotError as error:
            raise CommandError(str(error)) from None
