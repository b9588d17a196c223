"""Expected numbers computed straight from the fixture's records, not through the API's code."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal

from tests.pools.api import END, START, ZONE, ApiPool

CAP_SECONDS = 1800  # starvation_lost_work_cap_seconds of the default price book


def in_range(moment: dt.datetime, start: dt.datetime = START, end: dt.datetime = END) -> bool:
    return start <= moment < end


def places(value: Decimal, digits: int) -> str:
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def hours(seconds: Decimal) -> str:
    return places(Decimal(seconds) / 3600, 2)


def lost(gpus: Decimal, since_start: int, reported: Decimal | None) -> Decimal:
    return reported if reported is not None else min(CAP_SECONDS, since_start) * gpus


def group_key(api_pool: ApiPool, group_by: str, task: str, moment: dt.datetime) -> str:
    local = moment.astimezone(ZONE)
    return {
        "team": lambda: api_pool.team_of(task),
        "task": lambda: task,
        "kind": lambda: api_pool.kind_of(task),
        "day": lambda: local.date().isoformat(),
        "hour": lambda: local.replace(minute=0, second=0).isoformat(),
    }[group_by]()


def usage_by(api_pool: ApiPool, group_by: str, teams: set[str] | None = None) -> dict[str, dict]:
    groups: dict[str, dict] = defaultdict(
        lambda: {
            "alloc": Decimal(0),
            "busy": Decimal(0),
            "peak": 0,
            "memory": [],
            "reads": 0,
            "writes": 0,
            "read_bytes": 0,
            "write_bytes": 0,
            "preemptions": 0,
            "lost": Decimal(0),
            "waits": [],
        }
    )
    keep = lambda task: teams is None or api_pool.team_of(task) in teams  # noqa: E731
    for u in api_pool.usage:
        if in_range(u.interval) and keep(u.task):
            g = groups[group_key(api_pool, group_by, u.task, u.interval)]
            g["alloc"] += u.alloc
            g["busy"] += u.busy
            g["peak"] = max(g["peak"], u.memory_peak)
            g["memory"].append(u.memory_avg)
            for name in ("reads", "writes", "read_bytes", "write_bytes"):
                g[name] += getattr(u, name)
    for task, at, gpus, since_start, reported in api_pool.preemptions:
        if in_range(at) and keep(task):
            g = groups[group_key(api_pool, group_by, task, at)]
            g["preemptions"] += 1
            g["lost"] += lost(gpus, since_start, reported)
    for task, scheduled, seconds in api_pool.waits:
        if in_range(scheduled) and keep(task):
            groups[group_key(api_pool, group_by, task, scheduled)]["waits"].append(seconds)
    return dict(groups)


def api_row(expected: dict) -> dict:
    """The fields of a usage row the API must give for `expected`."""
    memory = expected["memory"]
    waits = expected["waits"]
    return {
        "allocated_gpu_seconds": places(expected["alloc"], 6),
        "allocated_gpu_hours": hours(expected["alloc"]),
        "busy_gpu_seconds": places(expected["busy"], 6),
        "busy_gpu_hours": hours(expected["busy"]),
        "memory_peak_bytes": expected["peak"],
        "memory_avg_bytes": int(
            (Decimal(sum(memory)) / len(memory)).quantize(Decimal(1), ROUND_HALF_UP)
        )
        if memory
        else 0,
        "read_operations": expected["reads"],
        "write_operations": expected["writes"],
        "read_bytes": expected["read_bytes"],
        "write_bytes": expected["write_bytes"],
        "preemptions": expected["preemptions"],
        "lost_gpu_hours": hours(expected["lost"]),
        "waits": len(waits),
        "mean_wait_seconds": places(Decimal(sum(waits)) / len(waits), 3) if waits else None,
    }
