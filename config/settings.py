"""Tandem settings: one module, the environment first.

Every value that differs between a laptop, CI and production comes from an environment
variable; the defaults are those of the demo (`make demo`).
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from decimal import Decimal
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path

import dj_database_url
import plotly
from django.core.exceptions import ImproperlyConfigured

from config import embedded

VAR_DIR = embedded.var_dir_from_environment()


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {value!r}") from None


def env_networks(name: str) -> tuple[IPv4Network | IPv6Network, ...]:
    """Comma-separated IP addresses or CIDR networks (an address is a network of one)."""
    networks = []
    for part in os.environ.get(name, "").split(","):
        if not part.strip():
            continue
        try:
            networks.append(ip_network(part.strip(), strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must be comma-separated IP addresses or CIDR networks, got {part!r}"
            ) from None
    return tuple(networks)


DEBUG = env_bool("TANDEM_DEBUG", True)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when TANDEM_DEBUG is off")
    # The key the entry points (manage.py, celery, wsgi, the demo) keep in var/; a process
    # started otherwise (a bare django.setup()) gets one of its own, since importing settings
    # writes nothing.
    SECRET_KEY = embedded.demo_secret_key_read(VAR_DIR) or secrets.token_urlsafe(50)

ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "metering",
    "billing",
    "reports",
    "dashboards",
    "access",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# Read, never started here: manage.py, `celery -A config`, config.wsgi, the demo and the test
# plugin start the embedded PostgreSQL and set DATABASE_URL before Django reads this module.
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if not DATABASE_URL:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set: set it to a postgres:// URL, or start Tandem through"
        " manage.py, `celery -A config`, config.wsgi or `make demo`, which start an embedded"
        " PostgreSQL under var/pgdata when DATABASE_URL is unset"
    )
try:
    # Persistent connections, checked at the first query of each request: after PostgreSQL
    # drops them (a restart, a failover, an idle timeout) that request reconnects instead of
    # answering 500.
    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
    }
except Exception as error:  # dj_database_url raises several types; the message is what matters
    raise ImproperlyConfigured(f"DATABASE_URL is malformed ({error})") from None
if DATABASES["default"].get("ENGINE") != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must be a postgres:// URL: Tandem needs PostgreSQL")
# JIT compiles every large aggregate anew (~150 ms a usage query, ~1 s on JSON histograms) and
# never pays that back on queries as short as ours.
DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c jit=off"

# A shared cache (throttle counters, dashboard aggregates) when several web workers run;
# each process keeps its own otherwise.
CACHE_URL = os.environ.get("CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Time -----------------------------------------------------------------------------
USE_TZ = True
TIME_ZONE = "UTC"  # storage and APIs are UTC; the pool's zone below is for periods and pages
TANDEM_TIMEZONE = os.environ.get("TANDEM_TIMEZONE", "Asia/Shanghai")
LANGUAGE_CODE = "en-us"
USE_I18N = False

# --- Static files (plotly.js is served from here: no CDN) -----------------------------
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
# plotly.js comes from the plotly package we pin, served as /static/plotly/plotly.min.js
STATICFILES_DIRS = [("plotly", Path(plotly.__file__).parent / "package_data")]

# --- Celery ---------------------------------------------------------------------------
# Never a Redis that merely answers on the machine: its queues belong to someone else. Without
# a URL, a filesystem queue under var/ (the demo sets the URL of a Redis of its own).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
if not CELERY_BROKER_URL:
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = embedded.filesystem_broker_options(VAR_DIR)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True  # a window killed mid-way is redelivered, never lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

# --- Telemetry ------------------------------------------------------------------------
PROMETHEUS_URL = os.environ.get("PROMETHEUS_URL", "")
TANDEM_STEP_SECONDS = env_int("TANDEM_STEP_SECONDS", 300)
# Windows tile the hour, so no window crosses an hour's, a day's or a month's end (the hourly
# rollup, peak hours and the month's close take whole windows). Fixed once windows are stored
# (metering.selectors.OffStep).
if not 0 < TANDEM_STEP_SECONDS <= 3600 or 3600 % TANDEM_STEP_SECONDS:
    raise ImproperlyConfigured(
        f"TANDEM_STEP_SECONDS must divide an hour (60, 300, 600, 900, 3600, ...), got"
        f" {TANDEM_STEP_SECONDS}"
    )
# Longest one HTTP request to Prometheus may take, headers and body together (the per-read
# time-out alone lets a server trickling bytes hold a worker forever).
TANDEM_PROMETHEUS_DEADLINE_SECONDS = env_int("TANDEM_PROMETHEUS_DEADLINE_SECONDS", 300)
if TANDEM_PROMETHEUS_DEADLINE_SECONDS <= 0:
    raise ImproperlyConfigured(
        "TANDEM_PROMETHEUS_DEADLINE_SECONDS must be a positive number of seconds, "
        f"got {TANDEM_PROMETHEUS_DEADLINE_SECONDS}"
    )
# Ask Prometheus for gzip-compressed answers: fewer bytes on the wire, more CPU on both ends
# (about 30% of Prometheus' CPU for a 10,000-GPU batch). For a Prometheus across a slow link;
# off when the workers sit next to it, as in the cluster.
TANDEM_PROMETHEUS_COMPRESSED = env_bool("TANDEM_PROMETHEUS_COMPRESSED", False)
# A month's scenario text (hundreds of MB) is hashed and compressed in a forked process while
# this one prices it: the two take about as long, on two cores at once. Off where a second
# process of the worker's size is unwelcome, or there is no fork(): then one after the other.
TANDEM_SCENARIO_DIGEST_FORKED = env_bool("TANDEM_SCENARIO_DIGEST_FORKED", True)
# Pages, reports and the health numbers sum the hourly rollup (kept by triggers) where a range
# allows it; off, they sum the metering intervals themselves (same numbers, slower).
TANDEM_READ_HOURLY_ROLLUP = env_bool("TANDEM_READ_HOURLY_ROLLUP", True)
TANDEM_INGEST_LAG_SECONDS = env_int("TANDEM_INGEST_LAG_SECONDS", 60)
TANDEM_SCRAPE_INTERVAL_SECONDS = env_int("TANDEM_SCRAPE_INTERVAL_SECONDS", 15)  # `default` source
# A batch of windows shares one range query per meter and one transaction. Its length follows
# the pool: at most BATCH_GPU_WINDOWS GPUs x windows (the GPUs the source's latest window
# expected), which bounds a worker's memory (peak RSS 532 MB for 10,000 GPUs x 24 windows,
# benchmarks/ingest.py --gpus 10000 --hours 3 --scrape 150), while a 1,000-GPU pool may take
# 20 hours (of a task's windows; a day at most). BATCH_WINDOWS windows while a source has none
# yet, and per task of `manage.py ingest`.
TANDEM_INGEST_BATCH_WINDOWS = env_int("TANDEM_INGEST_BATCH_WINDOWS", 12)
TANDEM_INGEST_BATCH_GPU_WINDOWS = env_int("TANDEM_INGEST_BATCH_GPU_WINDOWS", 240_000)
for _name in ("TANDEM_INGEST_BATCH_WINDOWS", "TANDEM_INGEST_BATCH_GPU_WINDOWS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1, got {globals()[_name]}")
# Beat catches up a source's missing or lost windows (an outage, a killed worker, a broker
# restart), however far back: at most this many in flight per source, oldest first.
TANDEM_INGEST_CATCHUP_WINDOWS = env_int("TANDEM_INGEST_CATCHUP_WINDOWS", 288)
TANDEM_INGEST_RETRY_BACKOFF_SECONDS = env_int("TANDEM_INGEST_RETRY_BACKOFF_SECONDS", 5)
TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS = env_int("TANDEM_INGEST_RETRY_BACKOFF_MAX_SECONDS", 600)
# Samples may reach Prometheus late (remote write catching up, a querier's store behind): beat
# ingests again a window below TANDEM_MIN_COMPLETENESS that ended less than this long ago.
TANDEM_INGEST_LATE_SECONDS = env_int("TANDEM_INGEST_LATE_SECONDS", 3600)
# A month closes only when every ingest window saw at least this share of expected samples.
TANDEM_MIN_COMPLETENESS = Decimal(os.environ.get("TANDEM_MIN_COMPLETENESS", "0.99"))

# --- API ------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 100,
    "COERCE_DECIMAL_TO_STRING": True,
    # Machines send `Authorization: Bearer <token>`; people use their session. Token first, so
    # an anonymous caller gets 401 with a Bearer challenge.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "access.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["access.permissions.HasRoleAndScope"],
    "DEFAULT_THROTTLE_CLASSES": ["access.throttles.ApiTokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api_token": os.environ.get("TANDEM_API_TOKEN_RATE", "600/min")},
}
SPECTACULAR_SETTINGS = {"TITLE": "Tandem API", "VERSION": "1.0.0"}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("TANDEM_LOG_LEVEL", "WARNING")},
}

# --- Reports --------------------------------------------------------------------------
TANDEM_REPORTS_DIR = Path(os.environ.get("TANDEM_REPORTS_DIR", VAR_DIR / "reports"))
TANDEM_REPORT_EMAILS = [
    address.strip()
    for address in os.environ.get("TANDEM_REPORT_EMAILS", "").split(",")
    if address.strip()
]
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "tandem@localhost")

# --- Partitions (metering.partitions) -------------------------------------------------
# Beat keeps the interval tables' monthly partitions created this many months ahead.
TANDEM_PARTITION_MONTHS_AHEAD = env_int("TANDEM_PARTITION_MONTHS_AHEAD", 3)

# --- Periodic work (Celery beat) ------------------------------------------------------
CELERY_BEAT_SCHEDULE = {
    "metering-ingest-newest-windows": {
        "task": "metering.tasks.ingest_newest_windows",
        "schedule": timedelta(seconds=TANDEM_STEP_SECONDS),
    },
    "billing-close-previous-month": {
        # the task itself decides whether last month is due (day 1, after the lag, complete)
        "task": "billing.tasks.close_previous_month",
        "schedule": 3600.0,
    },
    "billing-refresh-month-to-date": {
        # the quota export's month-to-date draft; ingestion also queues it after each window
        "task": "billing.tasks.refresh_month_to_date",
        "schedule": timedelta(seconds=TANDEM_STEP_SECONDS),
    },
    "metering-partitions-create-ahead": {
        # idempotent; daily, so a missed day still leaves months of partitions ahead
        "task": "metering.tasks.partitions_create_ahead",
        "schedule": timedelta(days=1),
    },
    "reports-monthly-run": {
        "task": "reports.tasks.report_runs_create_due",
        "schedule": 3600.0,
    },
}

# --- Security -------------------------------------------------------------------------
# Production (TANDEM_DEBUG off) is HTTPS only: secure cookies, HSTS, redirects to https.
# Each can be turned off from the environment, e.g. TANDEM_SECURE_SSL_REDIRECT=0 behind a
# proxy that terminates TLS and redirects itself.
SECURE_SSL_REDIRECT = env_bool("TANDEM_SECURE_SSL_REDIRECT", not DEBUG)
# The proxy in front says which scheme the client used; only trust it when it is ours.
if env_bool("TANDEM_BEHIND_TLS_PROXY", not DEBUG):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("TANDEM_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_HSTS_SECONDS = env_int("TANDEM_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("TANDEM_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("TANDEM_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CSRF_TRUSTED_ORIGINS = [
    origin for origin in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if origin
]

# Login throttling: after this many failed logins for one username from one address within
# the window, the login form refuses (429) without checking the password.
TANDEM_LOGIN_MAX_FAILURES = env_int("TANDEM_LOGIN_MAX_FAILURES", 5)
TANDEM_LOGIN_WINDOW_SECONDS = env_int("TANDEM_LOGIN_WINDOW_SECONDS", 900)
# Reverse proxies in front of Tandem: only when a request comes from one of them is the
# client's address read from X-Forwarded-For (its right-most address that is not a trusted
# proxy); anyone else could write that header, so their REMOTE_ADDR is the address.
TANDEM_TRUSTED_PROXIES = env_networks("TANDEM_TRUSTED_PROXIES")

# Who is acting, for the audit log of services called from a request (see audit.context);
# and a 400 for NUL bytes in addresses, which PostgreSQL refuses in any text lookup.
MIDDLEWARE = [
    *MIDDLEWARE,
    "audit.middleware.RefuseNulBytesMiddleware",
    "audit.middleware.AuditActorMiddleware",
]
