import os

from celery import Celery
from celery.signals import task_postrun
from django.db import reset_queries

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


@task_postrun.connect
def statements_forget(**kwargs: object) -> None:
    """With DEBUG on (the demo's default) Django keeps the text of every statement a connection
    runs, up to 9,000, and only a request's start lets them go: a worker never did, and a
    shard's staging statement carried its whole observation (tens of MB at 10,000 GPUs) while
    it went through Django's cursor (it no longer does, see metering.shards). Forgotten after
    each task, as after each request."""
    reset_queries()
