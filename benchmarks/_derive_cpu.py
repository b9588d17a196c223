"""The CPU of parsing and deriving one ingest batch, without Prometheus or the database: to
compare two checkouts of `metering.measure` on the same answers, and to check they derive the
same facts.

`benchmarks/_day_cpu.py` times a whole day, requests and writes included, which moves by a
few percent between runs on a shared machine. This asks Prometheus once for one batch of a
pool kept by `benchmarks/ingest.py --keep` (`--windows` windows from `--at` hours in, as a
worker would: `querying.observe_batch`), keeping the meters' answers as the parsers get them
and the batch's observation; then, `--runs` times in this process, it runs the parsers on
those answers into fresh intervals and `measure.derive` on the observation, and prints the
least CPU seconds (`time.process_time`) of each, and a digest of what they made (the parsed
intervals and each interval's derived facts, under a fixed PYTHONHASHSEED so that sets print alike):
two checkouts that derive the same facts print the same digest.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest \\
      .venv/bin/python benchmarks/ingest.py --gpus 1000 --hours 24 --scrape 150 --keep
    git worktree add /tmp/before HEAD~1
    for checkout in /tmp/before "$PWD" /tmp/before "$PWD"; do
      DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_ingest .venv/bin/python \\
        benchmarks/_derive_cpu.py var/bench/ingest-<pid> --gpus 1000 --checkout "$checkout"
    done

Not run by `make bench` (it needs a kept pool). The scratch database's metering rows are
TRUNCATEd before and after.
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # sets and their repr in one order
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"}
        )
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._kept import checkout_option, kept_first, kept_parser

    parser = kept_parser(__doc__.splitlines()[0], hours=24)
    parser.add_argument("--at", type=int, default=5, help="hours into the pool")
    parser.add_argument("--windows", type=int, default=72, help="a catch-up task's")
    parser.add_argument("--runs", type=int, default=5)
    checkout_option(parser, "parses and derives")
    options = parser.parse_args()
    options.kept = options.kept.resolve()
    sys.path.insert(0, str(options.checkout.resolve()))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    batch = _one_batch(options, kept_first(options))
    from metering import measure

    least: dict[str, float] = {}
    made = ""
    for _ in range(options.runs):
        # A copy each run: parsers change their answers (`_parse_io` takes the points a
        # pod-level series has from its containers'), and derive may change the observation.
        answers, observation, plan, first, last = pickle.loads(batch)
        step = plan.step_seconds
        observed = {start: measure.Observed() for start in range(first - step, last + 1, step)}
        gc.collect()
        for name, answer in answers:
            began = time.process_time()
            measure.PARSERS[name](answer, observed, plan)
            least[name] = min(least.get(name, float("inf")), time.process_time() - began)
        began = time.process_time()
        derived = measure.derive(observation, plan, first, last)
        least["derive"] = min(least.get("derive", float("inf")), time.process_time() - began)
        made = repr(observed) + repr(derived.intervals)
    print(
        f"{options.checkout}: least CPU of {options.runs} runs, {options.windows} windows of"
        f" {options.gpus:,} GPUs: "
        + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in least.items())
        + f"; all {sum(least.values()):.3f} s;"
        f" digest {hashlib.sha256(made.encode()).hexdigest()[:16]}",
        flush=True,
    )


def _one_batch(options: Any, first_sample: int) -> bytes:
    """The meters' answers as the parsers got them, the observation, the plan and the first
    and last interval starts of one batch, asked of the kept pool's Prometheus, pickled."""
    from django.conf import settings

    from benchmarks._kept import kept_prometheus
    from benchmarks.ingest import truncate_metering
    from metering import measure, querying, services, sources
    from metering.models import IngestWindow, Source

    answers: list[tuple[str, Any]] = []
    parsers = dict(measure.PARSERS)

    def kept(name: str, parse: Any) -> Any:
        def run(answer: Any, observed: Any, plan: Any) -> None:
            answers.append((name, answer))
            parse(answer, observed, plan)

        return run

    measure.PARSERS.update({name: kept(name, parse) for name, parse in parsers.items()})
    try:
        with kept_prometheus(options) as prometheus:
            truncate_metering()
            source = Source.objects.create(
                name="derive-cpu", url=prometheus.url, scrape_interval_seconds=options.scrape
            )
            start = dt.datetime.fromtimestamp(
                first_sample + options.at * 3600 - options.scrape, dt.UTC
            )
            step = dt.timedelta(seconds=settings.TANDEM_STEP_SECONDS)
            windows = services.windows_create(
                source=source, start=start, end=start + options.windows * step
            )
            run = list(
                IngestWindow.objects.filter(pk__in=[w.pk for w in windows]).order_by("start")
            )[: options.windows]
            plan = sources.query_plan_for(source, step_seconds=int(step.total_seconds()))
            observation = querying.observe_batch(source, plan, run[0].start, run[-1].start)
            truncate_metering()
    finally:
        measure.PARSERS.update(parsers)
    first, last = int(run[0].start.timestamp()), int(run[-1].start.timestamp())
    return pickle.dumps((answers, observation, plan, first, last))


if __name__ == "__main__":
    main()
