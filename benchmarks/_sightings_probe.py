"""What recording and checking the GPUs each source meters costs the database
(`metering.writer._sightings_replace`, `metering.selectors.gpus_metered_twice`), at 10,000
GPUs per source, on 20 days of a month's sightings with `--gaps` absences per GPU (each
breaks its multirange). Each figure beside a reference measured in the same run: the check
beside one scan of the month's sighting rows (`count(*)`), with no GPU shared by two sources
and with every GPU in two; the upsert of one window of 10,000 GPUs, live (after the
sightings so far) and written again (inside them), beside INSERTing the same 10,000 rows,
plain, into an empty table of the same shape (logged and indexed). The table is vacuumed
before each measurement. The best of `--runs`; every write is rolled
back. Not run by `make bench`; docs/telemetry.md ("One GPU, two sources") quotes it.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/sightings_probe \\
        .venv/bin/python benchmarks/_sightings_probe.py [--gaps 5] [--runs 5]

The database is a scratch one (its name says probe, scratch or bench, or the probe refuses):
migrated here, its sightings deleted first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from metering.models import GpuSighting, IngestWindow, Source  # noqa: E402
from metering.selectors import gpus_metered_twice  # noqa: E402
from metering.writer import WindowRows, _sightings_replace  # noqa: E402

GPUS = 10_000
MONTH = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
NOW = MONTH + dt.timedelta(days=20)  # the sightings so far end here: the live window starts
STEP = dt.timedelta(seconds=300)


class Rollback(Exception):
    pass


def best(runs: int, measure: Callable[[], None], *, rolled_back: bool = False) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        if rolled_back:
            try:
                with transaction.atomic():
                    measure()
                    times.append(time.perf_counter() - began)
                    raise Rollback
            except Rollback:
                pass
        else:
            measure()
            times.append(time.perf_counter() - began)
    return min(times)


def vacuum() -> None:
    """Every rolled-back write leaves 10,000 dead rows: swept before each measurement."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE metering_gpusighting")


def fill(sources: dict[str, Source], *, shared: bool, gaps: int) -> None:
    """A month of sightings: GPUs 0-9,999 in `a`, and in `b` the same ones (`shared`) or
    10,000 others; each missing for an hour `gaps` times, at places of its own."""
    GpuSighting.objects.all().delete()
    with connection.cursor() as cursor:
        for name, offset in (("a", 0), ("b", 0 if shared else GPUS)):
            cursor.execute(
                "INSERT INTO metering_gpusighting (source_id, month, uuid, node, seen)"
                " SELECT %(source)s, %(month)s, 'GPU-' || md5((i + %(offset)s)::text),"
                " 'node-' || (i / 8), tstzmultirange(tstzrange(%(start)s, %(end)s))"
                " - coalesce((SELECT range_agg(tstzrange(t, t + interval '1 hour'))"
                " FROM (SELECT %(start)s::timestamptz + ((j * 7919 + i * 104729) %% 5760)"
                " * interval '5 min' AS t FROM generate_series(1, %(gaps)s) j) x), '{}')"
                " FROM generate_series(0, %(gpus)s - 1) i",
                {
                    "source": sources[name].pk,
                    "month": MONTH.date(),
                    "offset": offset,
                    "start": MONTH,
                    "end": NOW,
                    "gaps": gaps,
                    "gpus": GPUS,
                },
            )
    vacuum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    name = connection.settings_dict["NAME"]
    if not any(word in name for word in ("probe", "scratch", "bench")):
        raise SystemExit(f"{name} is not a scratch database (its name says probe or scratch)")
    call_command("migrate", verbosity=0)
    GpuSighting.objects.all().delete()
    Source.objects.filter(name__in=["probe-a", "probe-b"]).delete()
    made = {n: Source.objects.create(name=f"probe-{n}", url="http://x") for n in ("a", "b")}

    def scan() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM metering_gpusighting WHERE month = %s", [MONTH])

    def check() -> None:
        gpus_metered_twice(start=MONTH, end=END)

    print(f"{GPUS:,} GPUs a source, a month of sightings, {options.gaps} gaps a GPU")
    for shared in (False, True):
        fill(made, shared=shared, gaps=options.gaps)
        reference, measured = best(options.runs, scan), best(options.runs, check)
        what = "every GPU in both sources" if shared else "no GPU shared"
        print(
            f"check, {what}: {measured * 1000:.1f} ms; one scan of the rows"
            f" {reference * 1000:.1f} ms; ratio {measured / reference:.1f}"
        )
    # A window of source a after its sightings so far (live), and one inside them (written
    # again), on top of its month.
    with connection.cursor() as cursor:
        cursor.execute("SELECT uuid FROM metering_gpusighting WHERE source_id = %s", [made["a"].pk])
        gpus = {uuid: "node" for (uuid,) in cursor.fetchall()}

    def plain() -> None:
        with connection.cursor() as cursor:
            # A table like the sightings' (logged, indexed), made and dropped in the rollback.
            cursor.execute("CREATE TABLE sightings_plain (LIKE metering_gpusighting INCLUDING ALL)")
            cursor.execute(
                "INSERT INTO sightings_plain (source_id, month, uuid, node, seen)"
                " SELECT %s, %s, uuid, 'node', tstzmultirange(tstzrange(%s, %s))"
                " FROM unnest(%s::text[]) AS u(uuid)",
                [made["a"].pk, MONTH.date(), NOW, NOW + STEP, list(gpus)],
            )

    reference = best(options.runs, plain, rolled_back=True)
    for what, start in (("live", NOW), ("written again", NOW - dt.timedelta(days=1))):
        vacuum()
        window = IngestWindow(source_id=made["a"].pk, start=start, end=start + STEP)
        measured = best(
            options.runs,
            lambda window=window: _sightings_replace([(window, WindowRows(gpus=gpus))]),
            rolled_back=True,
        )
        print(
            f"upsert of one window ({len(gpus):,} GPUs), {what}: {measured * 1000:.1f} ms; the"
            f" same rows INSERTed plain {reference * 1000:.1f} ms; ratio {measured / reference:.1f}"
        )
    GpuSighting.objects.all().delete()
    for source in made.values():
        source.delete()


if __name__ == "__main__":
    main()
