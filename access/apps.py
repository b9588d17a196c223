from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "Access control"

    def ready(self) -> None:
        # Registers the token scheme with drf-spectacular (extensions register on import).
        from access import schema  # noqa: F401
