"""Metering reads from Prometheus, for a batch of windows: what the source answers under a
query plan (`measure.observe`), within the source's cap on queries in flight.

Both an unsharded run (metering.ingest) and each shard of a sharded one (metering.shards) ask
Prometheus through here, so the cap holds across every worker and every shard."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.db import connection

from metering import measure, sources
from metering.models import Source

# First keys of PostgreSQL advisory locks: query slots per source, and one writer per window.
QUERY_SLOT_LOCK_CLASS = 0x7A6E


# A batch runs one query at a time: Prometheus evaluates it while Python reads the answer
# before it, and two workers keep two cores busy. Two a batch (four with two workers)
# finished no sooner on two cores and doubled Prometheus' evaluation time, which counts the
# time a query waits for a core (benchmarks/ingest.py, 10,000 GPUs x 2 h: 7.5x a scan at two,
# 4.9x at one).
QUERIES_IN_FLIGHT_PER_BATCH = 1


def observe_batch(
    source: Source,
    plan: sources.QueryPlan,
    first: datetime,
    last: datetime,
    *,
    follow_ups: bool = True,
) -> measure.Observation:
    """What Prometheus answers for the batch [first, last] (interval starts) under `plan`,
    within the source's query slots; without the narrowed follow-up queries for a shard
    (`measure.observe`)."""
    with _client(source, plan) as (client, plan):
        with query_slots(source, wanted=QUERIES_IN_FLIGHT_PER_BATCH) as slots:
            return measure.observe(
                client,
                plan,
                int(first.timestamp()),
                int(last.timestamp()),
                parallel=slots,
                follow_ups=follow_ups,
            )


def observe_whole_pool(
    source: Source,
    plan: sources.QueryPlan,
    first: datetime,
    last: datetime,
    shards_merged: Callable[[measure.Observation], measure.Observation],
) -> measure.Observation:
    """A sharded batch's combiner, with one client and one query slot: the meters no GPU
    series narrows (`sources.POD_METERS`) for the whole pool, merged with the shards' staged
    device meters by `shards_merged`, then the follow-up queries of the merged answers
    (`measure.follow_up`)."""
    start, end = int(first.timestamp()), int(last.timestamp())
    with _client(source, plan) as (client, plan), query_slots(source, wanted=1):
        pool_plan = dataclasses.replace(plan, node_set=None, meters=sources.POD_METERS)
        pool = measure.observe(client, pool_plan, start, end, follow_ups=False)
        return measure.follow_up(client, shards_merged(pool), plan, start, end)


@contextmanager
def _client(
    source: Source, plan: sources.QueryPlan
) -> Iterator[tuple[sources.PrometheusClient, sources.QueryPlan]]:
    """A client of the source, and the plan for its server, closed whatever happens."""
    client = sources.PrometheusClient.for_source(source)
    try:
        # Where the server's ranges start decides the range that holds [start, end).
        yield client, dataclasses.replace(plan, closed_ranges=client.ranges_closed())
    finally:
        client.close()


@contextmanager
def query_slots(source: Source, *, wanted: int) -> Iterator[int]:
    """Hold 1..wanted of the source's `max_concurrent_queries` slots, waiting for at least
    one: the cap on queries in flight against a source, across all workers.

    PostgreSQL session advisory locks, so a worker that dies releases its slots with its
    connection.
    """
    keys = [source.pk * 1000 + slot for slot in range(max(1, source.max_concurrent_queries))]
    held: list[int] = []
    with connection.cursor() as cursor:
        while not held:
            for key in keys:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [QUERY_SLOT_LOCK_CLASS, key])
                if cursor.fetchone()[0]:
                    held.append(key)
                    if len(held) == wanted:
                        break
            if not held:
                time.sleep(0.2)
    try:
        yield len(held)
    finally:
        with connection.cursor() as cursor:
            for key in held:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [QUERY_SLOT_LOCK_CLASS, key])
