"""Metering writes, one import for callers: sources and windows (metering.windows), the
ingestion of a run of windows (metering.ingest; in shards, metering.shards), who is who
(metering.identity) and the rows written (metering.writer). Each concern lives in its own
module; this one only names them."""

from metering.identity import _legacy_tasks_adopt, _teams_upsert, service_slo_set
from metering.ingest import window_ingest, windows_ingest
from metering.querying import QUERIES_IN_FLIGHT_PER_BATCH, QUERY_SLOT_LOCK_CLASS
from metering.shards import shard_ingest, shards_combine
from metering.windows import (
    StepChanged,
    WindowError,
    source_default_ensure,
    window_newest_closed_create,
    windows_create,
    windows_due_create,
)
from metering.writer import (
    LOSS_REFUSED,
    LossAcceptance,
    Withdrawn,
    latency_p99,
    latency_p99_fill,
    windows_withdraw,
)

__all__ = [
    "LOSS_REFUSED",
    "QUERIES_IN_FLIGHT_PER_BATCH",
    "QUERY_SLOT_LOCK_CLASS",
    "LossAcceptance",
    "StepChanged",
    "WindowError",
    "Withdrawn",
    "_legacy_tasks_adopt",
    "_teams_upsert",
    "latency_p99",
    "latency_p99_fill",
    "service_slo_set",
    "shard_ingest",
    "shards_combine",
    "source_default_ensure",
    "window_ingest",
    "window_newest_closed_create",
    "windows_create",
    "windows_due_create",
    "windows_ingest",
    "windows_withdraw",
]
