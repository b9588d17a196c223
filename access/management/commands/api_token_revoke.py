from django.core.management.base import BaseCommand, CommandError

from access.models import ApiToken
from access.services import api_token_revoke


class Command(BaseCommand):
    help = "Revoke an API token, found by its shown prefix (e.g. tdm_AbCdEfGh)."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix: str, **options):
        tokens = list(ApiToken.objects.filter(prefix=prefix, revoked_at__isnull=True))
        if len(tokens) != 1:
            raise CommandError(f"prefix: {len(tokens)} active tokens match {prefix!r}")
        api_token_revoke(token=tokens[0])
        self.stdout.write(f"revoked {tokens[0]}")
