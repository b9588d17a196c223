"""API speed with a month of a 1,000-GPU pool loaded (issue 5, "Speed").

Targets: the team monthly usage and the health endpoints answer in <= 1.5 s at p95, a
simple list endpoint (teams) within 3x the time of a bare DRF endpoint in the same run, and
the quota export (polled by schedulers) in <= 200 ms at p95 with the month-to-date draft of
the loaded month, whose refresh (the Celery task's work, never the request's) is reported.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_api .venv/bin/python benchmarks/api.py

Use a database of its own: the script migrates it and, once, fills it with synthetic metering
rows written by PostgreSQL itself (generate_series), about 4 million usage rows by default. A
second run reuses them. (A month loaded before 2026-12-01 allocates above capacity in some
intervals, which the pricing engine refuses: drop that database once so the month is loaded
again within capacity, or the quota export's draft row reports the engine's refusal.)
Requests go through the whole Django stack in-process (middleware, token authentication,
permissions, throttling), as `Authorization: Bearer` like a scheduler.
`main()` returns the rows for `benchmarks/run.py`; benchmarks/dashboards.py reuses `load`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("TANDEM_DEBUG", "0")  # no query log: time the code, not the debugger
os.environ.setdefault("SECRET_KEY", "benchmark-only-not-secret")
os.environ.setdefault("TANDEM_API_TOKEN_RATE", "1000000/min")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import include, path  # noqa: E402
from rest_framework.generics import ListAPIView  # noqa: E402
from rest_framework.permissions import AllowAny  # noqa: E402

from benchmarks._table import Row, report, within  # noqa: E402
from billing.models import MonthToDateDraft, Quota  # noqa: E402
from billing.services import month_to_date_draft_refresh  # noqa: E402
from metering.models import Team  # noqa: E402
from metering.services import latency_p99_fill  # noqa: E402
from reports.apis import TeamOutput  # noqa: E402

MONTH_START = "2026-09-30T16:00:00Z"  # October 2026 in Asia/Shanghai
MONTH_END = "2026-10-31T16:00:00Z"
BENCH_SOURCE = "bench-api"


class BareTeamListApi(ListAPIView):
    """The floor: the same list of teams in plain DRF, with no authentication, roles,
    visibility rule or throttle. Tandem's teams list pays for those on top of this."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []
    serializer_class = TeamOutput
    queryset = Team.objects.order_by("name")


urlpatterns = [
    path("bench/bare/", BareTeamListApi.as_view()),
    path("", include("config.urls")),
]


def load(*, gpus: int, tasks: int, teams: int, services: int) -> None:
    """Write the month once, in SQL: teams, tasks, capacity, usage, latency, waits, windows."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM metering_source WHERE name = %s", [BENCH_SOURCE])
        if cursor.fetchone():
            print("reusing the loaded month")
            store_p99()
            return
        print(f"loading a month: {gpus} GPUs, {tasks} tasks, {teams} teams ...", flush=True)
        started = time.perf_counter()
        cursor.execute(
            SQL_LOAD,
            {
                "gpus": gpus,
                "tasks": tasks,
                "teams": teams,
                "services": services,
                "source": BENCH_SOURCE,
                "start": MONTH_START,
                "end": MONTH_END,
            },
        )
        store_p99()
        cursor.execute("ANALYZE")
        cursor.execute("SELECT count(*) FROM metering_usageinterval")
        print(f"  {cursor.fetchone()[0]:,} usage rows in {time.perf_counter() - started:.0f} s")


def store_p99() -> None:
    """Each latency interval's own P99, stored as ingest stores it (SQL cannot compute the
    engine's quantile, so the load leaves it empty)."""
    started = time.perf_counter()
    filled = latency_p99_fill()
    if filled:
        print(
            f"  stored the P99 of {filled:,} latency intervals"
            f" in {time.perf_counter() - started:.0f} s"
        )


SQL_LOAD = """
INSERT INTO metering_source (name, url, bearer_token, basic_auth_user, basic_auth_password,
    verify_tls, scrape_interval_seconds, label_mapping, priority_class_kinds,
    max_concurrent_queries, shard_node_patterns, enabled, created)
VALUES (%(source)s, 'http://127.0.0.1:9', '', '', '', true, 15, '{}', '{}', 4, '[]', true, now());

INSERT INTO metering_team (name, created)
SELECT 'team-' || lpad(n::text, 3, '0'), now() FROM generate_series(1, %(teams)s) n;

INSERT INTO metering_task (source_id, external_id, team_id, kind, fault_domain, first_seen)
SELECT s.id, 'task-' || n, t.id,
       (ARRAY['inference','training_interactive','training_batch','preprocessing'])[1 + n %% 4],
       '', %(start)s::timestamptz
FROM generate_series(1, %(tasks)s) n
JOIN metering_source s ON s.name = %(source)s
JOIN metering_team t ON t.name = 'team-' || lpad((1 + n %% %(teams)s)::text, 3, '0');

INSERT INTO metering_capacityinterval (source_id, fault_domain, interval_start, gpus_present,
    capacity_gpu_seconds)
SELECT s.id, '', ts, %(gpus)s, %(gpus)s * 300
FROM metering_source s,
     generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '5 min',
                     interval '5 min') ts
WHERE s.name = %(source)s;

-- Every task holds between half and all of gpus/tasks GPUs: the pool runs about three
-- quarters full and never above its capacity, which the engine would refuse (the quota
-- export's draft prices this month). (random() in a select list runs per row; in a LATERAL
-- subquery that names no outer column it would run once.)
INSERT INTO metering_usageinterval (task_id, interval_start, alloc_gpu_seconds,
    busy_gpu_seconds, memory_avg_bytes, memory_peak_bytes, read_operations, write_operations,
    read_bytes, write_bytes)
SELECT id, ts, a, round(a * (0.3 + random() * 0.65)::numeric, 6),
       (random() * 4e10)::bigint, (4e10 + random() * 1e9)::bigint,
       (random() * 1e5)::bigint, (random() * 1e5)::bigint,
       (random() * 1e9)::bigint, (random() * 1e9)::bigint
FROM (
    SELECT k.id, ts,
           round(((0.5 + random() * 0.5) * 300 * %(gpus)s / %(tasks)s)::numeric, 6) AS a
    FROM metering_task k
    JOIN metering_source s ON s.id = k.source_id AND s.name = %(source)s
    CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '5 min',
                               interval '5 min') ts
) usage;

INSERT INTO metering_service (source_id, external_id, team_id, slo_p99_ms, is_key)
SELECT k.source_id, 'ns/' || k.external_id, k.team_id, 1500, true
FROM metering_task k JOIN metering_source s ON s.id = k.source_id AND s.name = %(source)s
WHERE k.kind = 'inference' ORDER BY k.id LIMIT %(services)s;

INSERT INTO metering_latencyinterval (service_id, interval_start, buckets, request_count)
SELECT id, ts,
       jsonb_build_array(jsonb_build_array('0.25', b), jsonb_build_array('0.5', b + 40),
                         jsonb_build_array('1', b + 60), jsonb_build_array('2.5', b + 64 + j),
                         jsonb_build_array('5', b + 70), jsonb_build_array('+Inf', b + 70)),
       b + 70
FROM (
    SELECT v.id, ts, (random() * 400)::int AS b, (random() * 5)::int AS j
    FROM metering_service v
    JOIN metering_source s ON s.id = v.source_id AND s.name = %(source)s
    CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '5 min',
                               interval '5 min') ts
) latency;

INSERT INTO metering_podwait (task_id, pod, created, scheduled, ended, seconds)
SELECT id, pod, scheduled - make_interval(secs => w), scheduled, scheduled, w
FROM (
    SELECT k.id, k.external_id || '-' || n AS pod,
           %(start)s::timestamptz + random() * interval '30 days' AS scheduled,
           (random() * 900)::int AS w
    FROM metering_task k
    JOIN metering_source s ON s.id = k.source_id AND s.name = %(source)s
    CROSS JOIN generate_series(1, 20) n
) waits;

INSERT INTO metering_preemption (task_id, pod, pods, at, gpus, seconds_since_start)
SELECT k.id, k.external_id || '-p' || n, 1,
       %(start)s::timestamptz + random() * interval '30 days', 2, (random() * 7200)::int
FROM metering_task k
JOIN metering_source s ON s.id = k.source_id AND s.name = %(source)s
CROSS JOIN generate_series(1, 5) n
WHERE k.kind IN ('training_batch', 'preprocessing');

INSERT INTO metering_ingestwindow (source_id, start, "end", status, attempts, rows_written,
    queries, prometheus_seconds, samples_seen, samples_expected, completeness, warnings, error,
    content_hash, updated)
SELECT s.id, ts, ts + interval '1 hour', 'done', 1, 0, '[]', 0, 0, 0, 1, '[]', '', '', now()
FROM metering_source s,
     generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour',
                     interval '1 hour') ts
WHERE s.name = %(source)s;
"""


def bench_token() -> str:
    from django.contrib.auth import get_user_model

    from access.models import ApiToken
    from access.services import api_token_create, role_assign

    user, _ = get_user_model().objects.get_or_create(username="bench-finance")
    role_assign(user=user, name="finance")
    ApiToken.objects.filter(owner=user).delete()
    _, plain = api_token_create(owner=user, name="bench", scopes=["read", "quota:read"])
    return plain


def timings(client: Client, url: str, runs: int, budget: float | None = None) -> list[float]:
    """`runs` timed requests after a warm-up; with a `budget` (seconds), stop early once it is
    spent and at least 5 were timed, so a slow endpoint cannot stretch the run for minutes."""
    response = client.get(url, secure=True)  # warm: imports, connection, plans; HTTPS as deployed
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url, secure=True)
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200
        if budget is not None and len(seconds) >= 5 and sum(seconds) > budget:
            break
    return seconds


def quota_export(client: Client, runs: int, budget: float | None) -> tuple[list[float], float, str]:
    """The quota export as a scheduler polls it half an hour before the loaded month ends:
    the month-to-date draft is priced first from scratch (timed: what the Celery task does
    after ingestion), then the export is timed; it only reads the draft. The clock is set
    into the loaded month for both, since the export serves the month containing "now".
    Returns the timings, the refresh's seconds and the draft's error (a month loaded by an
    older version of this script allocates above capacity: drop its database to reload)."""
    near_end = dt.datetime.fromisoformat(MONTH_END) - dt.timedelta(minutes=30)
    for team in Team.objects.order_by("name")[::4]:  # a quota for every fourth team
        Quota.objects.update_or_create(
            team=team,
            defaults={"allowance_gpu_hours": Decimal(50_000), "allowance_money": Decimal(10**6)},
        )
    MonthToDateDraft.objects.all().delete()
    started = time.perf_counter()
    draft = month_to_date_draft_refresh(now=near_end)
    refresh = time.perf_counter() - started
    assert draft is not None, "another refresh held the lock"
    with mock.patch("django.utils.timezone.now", return_value=near_end):
        body = client.get("/api/v1/quotas/export/", secure=True).json()
        assert body["teams"] and body["teams"][0]["month_to_date_stale"] is False, body
        seconds = timings(client, "/api/v1/quotas/export/", runs, budget)
    return seconds, refresh, draft.error


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=460, help="~4 M usage rows a month")
    parser.add_argument("--teams", type=int, default=40)
    parser.add_argument("--services", type=int, default=10, help="key inference services")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quota-runs", type=int, default=50, help="quota export requests")
    parser.add_argument("--budget", type=float, help="seconds per endpoint; at least 5 runs")
    args = parser.parse_args(argv)
    call_command("migrate", verbosity=0)
    load(gpus=args.gpus, tasks=args.tasks, teams=args.teams, services=args.services)
    client = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {bench_token()}")
    month = f"start={MONTH_START}&end={MONTH_END}"
    cases = {
        "usage by team, a month": f"/api/v1/usage/?{month}&group_by=team",
        "health, a month": f"/api/v1/health/?{month}",
        "teams list": "/api/v1/teams/",
        "bare DRF endpoint": "/bench/bare/",
    }
    results = {}
    with override_settings(ROOT_URLCONF=__name__):
        for name, url in cases.items():
            results[name] = timings(client, url, args.runs, args.budget)
        quota_timings, refresh, draft_error = quota_export(client, args.quota_runs, args.budget)
        results["quota export, draft"] = quota_timings
    print(f"month-to-date draft refresh, from scratch: {refresh:.1f} s {draft_error}")
    print(f"{'endpoint':28} {'p50 ms':>9} {'p95 ms':>9}")
    for name, seconds in results.items():
        print(f"{name:28} {statistics.median(seconds) * 1000:9.1f} {p95(seconds) * 1000:9.1f}")
    ratio = statistics.median(results["teams list"]) / statistics.median(
        results["bare DRF endpoint"]
    )
    print(f"teams list / bare DRF (median): {ratio:.2f}x (target <= 3x)")
    for name in ("usage by team, a month", "health, a month"):
        verdict = "ok" if p95(results[name]) <= 1.5 else "OVER"
        print(f"{name}: p95 {p95(results[name]):.3f} s (target <= 1.5 s) {verdict}")
    bare = p95(results["bare DRF endpoint"])
    month_size = f"{args.gpus:,} GPUs, {args.tasks} tasks"
    rows = []
    for name in ("usage by team, a month", "health, a month", "teams list"):
        value = p95(results[name])
        ok = within(value / bare, at_most=3) if name == "teams list" else within(value, at_most=1.5)
        rows.append(
            Row(
                figure=f"API p95, {name} ({month_size}, {len(results[name])} runs)",
                value=f"{value * 1000:,.1f} ms",
                reference=f"bare DRF p95 {bare * 1000:,.1f} ms",
                ratio=value / bare,
                goal="ratio <= 3" if name == "teams list" else "p95 <= 1500 ms",
                ok=ok,
            )
        )
    quota = p95(results["quota export, draft"])
    rows.append(
        Row(
            figure=f"API p95, quota export with the month-to-date draft ({month_size},"
            f" {len(results['quota export, draft'])} runs)",
            value=f"{quota * 1000:,.1f} ms",
            reference=f"bare DRF p95 {bare * 1000:,.1f} ms",
            ratio=quota / bare,
            goal="p95 <= 200 ms",
            ok=within(quota, at_most=0.2),
        )
    )
    rows.append(
        Row(
            figure=f"month-to-date draft refresh, a month ({month_size}; Celery, not the request)",
            value=f"{refresh:.1f} s",
            reference="",
            ratio=None,
            goal="reported",
            ok=False if draft_error else None,
            note=draft_error[:120],
        )
    )
    return rows


if __name__ == "__main__":
    report(main())
