from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"

    def ready(self) -> None:
        # Every period close stores the report's health numbers with its statements
        # (reports/period_health.py); billing calls the hook without importing reports.
        from billing.close_hooks import period_close_hook_register
        from reports.period_health import HEALTH_SNAPSHOT_HOOK

        period_close_hook_register(HEALTH_SNAPSHOT_HOOK)
