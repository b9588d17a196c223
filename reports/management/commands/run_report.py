from django.core.management.base import BaseCommand, CommandError

from reports import services
from reports.models import ReportRun
from reports.rows import ReportInputError


class Command(BaseCommand):
    help = "Write a closed month's report files now, in this process, and print them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="YYYY-MM, a closed month")
        parser.add_argument(
            "--kind", choices=ReportRun.Kind.values, default=ReportRun.Kind.ON_DEMAND
        )
        parser.add_argument("--no-pdf", action="store_true", help="skip the PDF (no Chromium)")

    def handle(self, *args, period: str, kind: str, no_pdf: bool, **options) -> None:
        try:
            run = services.report_run_create(
                period=period, kind=kind, parameters={"pdf": not no_pdf}, enqueue=False
            )
            run = services.report_run_execute(run_id=run.pk)
        except ReportInputError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"report run #{run.pk} ({run.kind}) for {run.period}: {run.status}")
        for report_file in run.files.order_by("kind", "name"):
            self.stdout.write(f"{report_file.sha256}  {report_file.path}")
