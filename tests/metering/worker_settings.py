"""Settings for the Celery worker the metering tests start: the project's, with short broker
visibility and retry times so redelivery and backoff happen within a test."""

from config.settings import *  # noqa: F403

CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3}
TANDEM_INGEST_RETRY_BACKOFF_SECONDS = 1
TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS = 2
