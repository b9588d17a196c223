from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create (or reset) the demo superuser `demo` with the given password."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--password", required=True)
        parser.add_argument("--username", default="demo")

    def handle(self, *args, password: str, username: str, **options) -> None:
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
