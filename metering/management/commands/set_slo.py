"""`manage.py set_slo --service NAMESPACE/MODEL --p99-ms N`: state a service's latency objective."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from metering import services


class Command(BaseCommand):
    help = "Set the P99 latency objective (SLO) of an inference service, in milliseconds."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--service", required=True, help="service id, e.g. chat/llama-3-8b")
        parser.add_argument("--p99-ms", type=int, required=True, dest="p99_ms")

    def handle(self, *args, service: str, p99_ms: int, **options) -> None:
        try:
            changed = services.service_slo_set(external_id=service, slo_p99_ms=p99_ms)
        except services.WindowError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"{service}: SLO P99 {p99_ms} ms ({changed} service(s))")
