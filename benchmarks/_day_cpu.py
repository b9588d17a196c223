"""The CPU one process spends ingesting a kept pool, and Prometheus' CPU to answer it: to
compare two checkouts of Tandem on the same data.

`make bench` times an ingest with two worker processes sharing two cores with Prometheus: its
wall time moves by half a second between runs. This ingests the whole kept pool in THIS
process, batch by batch as a worker does, and prints the process' CPU seconds (every thread:
requests, JSON decoding, parsing, deriving, writing) and Prometheus' (/proc), which move by
a few percent, and the process' peak resident memory. Run it against two checkouts,
interleaved (a `git worktree` of the commit before a change, say), with the same kept pool:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/ingest.py --gpus 1000 --hours 24 --scrape 150 --keep
    git worktree add /tmp/before HEAD~1
    for checkout in /tmp/before "$PWD" /tmp/before "$PWD"; do
      DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest .venv/bin/python \\
        benchmarks/_day_cpu.py "$PWD/var/bench/ingest-<pid>" --gpus 1000 --hours 24 \\
        --checkout "$checkout"
    done

Not run by `make bench` (it needs a kept pool). The scratch database's metering rows are
TRUNCATEd before each run and after the last.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._kept import checkout_option, kept_parser


def main() -> None:
    parser = kept_parser(__doc__.splitlines()[0], hours=24)
    parser.add_argument("--runs", type=int, default=1)
    checkout_option(parser, "ingests")
    options = parser.parse_args()
    sys.path.insert(0, str(options.checkout.resolve()))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    # The checkout's own code, imported once Django is set up: its metering (services, ingest);
    # the bench's helpers (BATCH, the CPU reading, the TRUNCATE) are this one's, whose
    # `benchmarks` package came first. The pool's windows are made here, not by a helper of
    # this checkout's benchmarks that the other checkout may lack.
    from benchmarks.ingest import BATCH, cpu_seconds, truncate_metering
    from metering import ingest, services
    from metering.models import Source
    from simulator.prometheus import lookback_for, start_prometheus

    kept = options.kept.resolve()
    recorded = kept / f"simulated-{options.gpus}x{options.hours}h-{options.scrape}s.json"
    first = json.loads(recorded.read_text())["first"]
    last = first + (options.hours * 3600 // options.scrape - 1) * options.scrape
    prometheus = start_prometheus(
        kept / f"tsdb-{options.gpus}",
        lookback_delta=lookback_for(options.scrape),
        scrape_interval=f"{options.scrape}s",
    )
    try:
        for _ in range(options.runs):
            truncate_metering()
            source = Source.objects.create(
                name="day-cpu", url=prometheus.url, scrape_interval_seconds=options.scrape
            )
            windows = services.windows_create(
                source=source,
                start=dt.datetime.fromtimestamp(first - options.scrape, dt.UTC),
                end=dt.datetime.fromtimestamp(last, dt.UTC),
            )
            ids = [window.pk for window in windows]
            began, spent = time.perf_counter(), time.process_time()
            answered = cpu_seconds([prometheus.pid])
            for index in range(0, len(ids), BATCH):
                ingest.windows_ingest(window_ids=ids[index : index + BATCH])
            print(
                f"{options.checkout}: this process' CPU {time.process_time() - spent:.2f} s,"
                f" Prometheus' CPU {cpu_seconds([prometheus.pid]) - answered:.2f} s,"
                f" wall {time.perf_counter() - began:.2f} s ({len(ids)} windows),"
                f" this process' peak RSS {_peak_mib():,.0f} MiB",
                flush=True,
            )
    finally:
        prometheus.stop()
        truncate_metering()


def _peak_mib() -> float:
    """This process' peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
