from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from access.models import SCOPE_READ, TOKEN_SCOPES
from access.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print it once (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("--owner", required=True, help="username of the token's owner")
        parser.add_argument("--name", required=True, help="what the token is for")
        parser.add_argument(
            "--scope",
            action="append",
            choices=[code for code, _ in TOKEN_SCOPES],
            help=f"repeat for several; default {SCOPE_READ}",
        )

    def handle(self, *args, owner: str, name: str, scope: list[str] | None, **options):
        user = get_user_model().objects.filter(username=owner).first()
        if user is None:
            raise CommandError(f"--owner: no user named {owner!r}")
        try:
            token, plain = api_token_create(owner=user, name=name, scopes=scope or [SCOPE_READ])
        except ValidationError as error:
            raise CommandError(f"{error.message_dict}") from None
        self.stdout.write(plain)
        self.stderr.write(f"token {token.prefix}… scopes {token.scopes}: store it now")
