import os

from celery import Celery

from config.embedded import embedded_defaults_ensure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("tandem")


@app.on_configure.connect
def embedded_defaults_before_settings(sender: Celery, **kwargs: object) -> None:
    # `celery -A config worker|beat` started by hand: the embedded PostgreSQL (when
    # DATABASE_URL is unset) and the demo's key, before Celery reads Django's settings. Not at
    # import: importing config.settings imports this module, and settings start nothing.
    embedded_defaults_ensure()


app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
