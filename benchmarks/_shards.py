"""Where a sharded ingest's time goes: each part timed in one process, on a kept pool.

`make bench` reports a sharded day's wall time against the unsharded one, through Celery (two
worker processes, so the order tasks run in moves it); this says what the shards cost in
total, without Celery. It ingests the same windows of a TSDB kept by
`benchmarks/ingest.py --keep` in this process, unsharded and then in `--shards` shards (run one
after the other and combined here, `shard_dispatch=None`), in batches of `--batch` windows,
with a timer around each part (Prometheus queries and their parsing, staging a shard's
observation: dumped, its row written and read, loaded back; merging, deriving, the write),
`--repeat` times alternately, and prints the fastest of each. Then, by arithmetic from those
parts, the sharded run on one machine per shard: each batch's slowest shard, then its
combiner (queries, merging, deriving, the write), as if the shards had run side by side and
Prometheus (a query frontend) kept up; the part of a batch that more machines do not shorten.
Not run by `make bench` (it needs a kept pool; its figures are a breakdown, not a goal).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/ingest.py --gpus 1000 --hours 24 --scrape 150 --keep
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/_shards.py var/bench/ingest-<pid> --gpus 1000 --hours 24

The scratch database's metering rows are TRUNCATEd first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from benchmarks._kept import (  # noqa: E402
    PartTimers,
    kept_first,
    kept_parser,
    kept_prometheus,
    timed_parts,
)
from benchmarks.ingest import node_patterns, truncate_metering  # noqa: E402
from metering import identity, ingest, measure, querying, services, shards  # noqa: E402
from metering.models import IngestWindow, Source  # noqa: E402

# (module, function, what a reader calls it), timed by "module.function".
SHARD = "metering.shards.shard_ingest"
PARTS = [
    (querying, "observe_batch", "Prometheus: queries and parsing (every shard's)"),
    (querying, "observe_whole_pool", "the combiner's queries (merging included)"),
    (measure, "follow_up", "  of which the follow-up queries"),
    (shards, "observation_dump", "staging: a shard's observation dumped"),
    (shards, "shard_ingest", "  a shard in all (queries, dump, staged row)"),
    (shards, "_observation_stage", "staging: the staged row written"),
    (shards, "_observation_staged", "staging: the staged row read by the combiner"),
    (shards, "observation_load", "staging: loaded back by the combiner"),
    (shards, "observations_merge", "  merging the shards (loading included)"),
    (measure, "derive", "deriving the facts"),
    (identity, "_tasks_upsert", "task upsert"),
    (ingest, "_run_write", "the write"),
    (shards, "_run_write", "the write"),
]


def main() -> None:
    parser = kept_parser(__doc__.splitlines()[0], hours=24)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--batch", type=int, default=72, help="windows per batch")
    parser.add_argument("--batches", type=int, default=2, help="batches ingested each time")
    parser.add_argument("--repeat", type=int, default=2)
    options = parser.parse_args()
    first = kept_first(options)
    timers = PartTimers()
    timed_parts(timers, PARTS, by_module=True)
    ingest._tasks_upsert = shards._tasks_upsert = identity._tasks_upsert  # imported by name
    dump = shards.observation_dump
    staged: list[int] = []  # bytes each shard staged, the last sharded run's

    def dump_counted(observation: Any) -> bytes:
        dumped = dump(observation)
        staged.append(len(dumped))
        return dumped

    shards.observation_dump = dump_counted
    # The fastest of the repeats, of the unsharded (False) and the sharded (True) ingest: its
    # seconds, by part, and each shard's, in the order they ran.
    best: dict[bool, tuple[float, dict[str, float], list[float]]] = {}
    with kept_prometheus(options) as prometheus:
        truncate_metering()
        for attempt in range(options.repeat):
            for sharded in (False, True):
                timers.seconds.clear()
                timers.calls.clear()
                staged.clear()
                total = ingest_once(prometheus.url, options, first, sharded, attempt)
                if sharded not in best or total < best[sharded][0]:
                    shard_calls = list(timers.calls[SHARD])
                    best[sharded] = (total, dict(timers.seconds), shard_calls)
    step = settings.TANDEM_STEP_SECONDS
    print(
        f"{options.gpus:,} GPUs, {options.batch * options.batches} windows of {step // 60}"
        f" minutes in batches of {options.batch}, fastest of {options.repeat}; {options.shards}"
        " shards run one after the other in this process"
    )
    for sharded, label in ((False, "unsharded"), (True, f"{options.shards} shards")):
        total, seconds, _ = best[sharded]
        print(f"{label}: {total:.2f} s")
        for module, name, part in PARTS:
            key = f"{module.__name__}.{name}"
            if key in seconds:
                print(f"  {part:<52} {seconds[key]:7.2f} s")
    print(f"sharded / unsharded: {best[True][0] / best[False][0]:.2f}")
    total, _, shard_calls = best[True]
    unsharded = best[False][0]
    serial = total - sum(shard_calls)  # the combiners, and what the batches share
    alone = serial + slowest_shards(shard_calls, options.shards)
    print(
        f"on one machine per shard (arithmetic: each batch's slowest shard, then its combiner):"
        f" {alone:.2f} s, {alone / unsharded:.2f} of the unsharded run; of it the combiners'"
        f" part, which no number of shards shortens: {serial:.2f} s, {serial / unsharded:.2f}"
    )
    per_shard = ", ".join(f"{size / 2**20:.1f}" for size in staged[: options.shards])
    print(f"staged per shard of a {options.batch}-window batch: {per_shard} MiB (uncompressed)")


def slowest_shards(shard_calls: list[float], shards: int) -> float:
    """Each batch's slowest shard, summed: the shards' part of the run had each batch's shards
    run side by side. They ran one batch after another, `shards` at a time, in the order of
    `shard_calls`."""
    batches = [shard_calls[at : at + shards] for at in range(0, len(shard_calls), shards)]
    return sum(max(batch) for batch in batches)


def ingest_once(url: str, options: argparse.Namespace, first: int, sharded: bool, n: int) -> float:
    """Ingest the span once on a new source (so nothing is replaced); its seconds."""
    source = Source.objects.create(
        name=f"{'sharded' if sharded else 'unsharded'}-{n}",
        url=url,
        scrape_interval_seconds=options.scrape,
        shard_node_patterns=node_patterns(options.gpus, options.shards),
    )
    windows = options.batch * options.batches
    # Six hours in, where the pool is busy: the span the bench's day spends most time on.
    start = dt.datetime.fromtimestamp(first + 6 * 3600, dt.UTC)
    end = start + dt.timedelta(seconds=settings.TANDEM_STEP_SECONDS * windows)
    ids = [w.pk for w in services.windows_create(source=source, start=start, end=end)]
    began = time.perf_counter()
    for index in range(0, windows, options.batch):
        batch = list(
            IngestWindow.objects.filter(pk__in=ids[index : index + options.batch])
            .select_related("source")
            .order_by("start")
        )
        ingest._run_ingest(batch, None, None, sharded=sharded)
    return time.perf_counter() - began


if __name__ == "__main__":
    main()
