"""Small scenario dicts for the pricing tests (docs/pricing.md "Scenario files").

The book is docs/pricing.md's example: R = 14.3740, R_off = 12.0740 CNY per GPU-hour, 30% reserved
for inference, peak 09:00-22:00 Asia/Shanghai (UTC+8), X = 20.00, M = 100, N = 3, cap 1800 s.
One interval of 10 GPUs is 3,000 GPU-seconds, so C = 11.978333... per full interval.
"""

from __future__ import annotations

from typing import Any

from billing.pricing import price, result_to_dict, scenario_from_dict

BOOK: dict[str, Any] = {
    "currency": "CNY",
    "timezone": "Asia/Shanghai",
    "depreciation_per_gpu_hour": "11.50",
    "facility_per_gpu_hour": "2.30",
    "electricity_per_kwh": "0.82",
    "gpu_average_power_kw": "0.70",
    "reserved_inference_share": "0.30",
    "peak_hours": [9, 22],
    "sla_penalty_per_interval": "20.00",
    "sla_min_requests": 100,
    "starvation_preemption_threshold": 3,
    "starvation_lost_work_cap_seconds": 1800,
}
TASKS = [
    {"id": "search-api", "team": "search", "kind": "inference"},
    {"id": "chat-api", "team": "chat", "kind": "inference"},
    {"id": "vit", "team": "vision", "kind": "training_batch"},
    {"id": "llm", "team": "nlp", "kind": "training_batch"},
    {"id": "notebook", "team": "nlp", "kind": "training_interactive"},
]
SERVICES = [{"id": "search-api", "team": "search", "slo_p99_ms": 300}]
PEAK = "2026-10-01T02:00:00Z"  # 10:00 in Shanghai
OFFPEAK = "2026-10-01T15:00:00Z"  # 23:00 in Shanghai
FULL = 3000  # 10 GPUs x 300 s


def scenario(
    *,
    capacity: dict[str, Any] | None = None,
    usage: list[tuple[str, str, Any]] = (),
    latency: list[tuple[str, str, list]] = (),
    preemptions: list[dict] = (),
    book: dict[str, Any] | None = None,
    tasks: list[dict] | None = None,
) -> dict:
    """A scenario dict; `capacity` maps interval -> GPU-seconds (default: PEAK at FULL)."""
    return {
        "step_seconds": 300,
        "price_book": {**BOOK, **(book or {})},
        "tasks": TASKS if tasks is None else tasks,
        "services": SERVICES,
        "capacity": [
            {"interval": interval, "capacity_gpu_seconds": seconds}
            for interval, seconds in (capacity or {PEAK: FULL}).items()
        ],
        "usage": [
            {"interval": interval, "task": task, "alloc_gpu_seconds": alloc}
            for interval, task, alloc in usage
        ],
        "latency": [
            {"service": service, "interval": interval, "buckets": buckets}
            for service, interval, buckets in latency
        ],
        "preemptions": list(preemptions),
    }


def priced(data: dict) -> dict:
    """The output JSON (as a dict) of pricing `data`."""
    return result_to_dict(price(scenario_from_dict(data)))


def slow_buckets(count: int) -> list:
    """`count` requests, 75% under 0.1 s and the rest slower than 0.5 s: P99 = 0.5 s."""
    fast = count * 3 // 4
    return [[0.1, fast], [0.5, fast], ["+Inf", count]]


def preemption(at: str, *, lost: Any = None, seconds: int = 600, gpus: int = 1) -> dict:
    return {
        "task": "llm",
        "at": at,
        "gpus": gpus,
        "seconds_since_start": seconds,
        "lost_gpu_seconds": lost,
    }


# Two GPU classes of a mixed pool (docs/pricing.md "GPU classes"): the L40S reserves its own
# share for inference.
H100 = {
    "name": "H100",
    "models": ["NVIDIA H100 80GB HBM3"],
    "depreciation_per_gpu_hour": "38.00",
    "facility_per_gpu_hour": "4.10",
    "gpu_average_power_kw": "0.70",
}
L40S = {
    "name": "L40S",
    "models": ["NVIDIA L40S"],
    "depreciation_per_gpu_hour": "9.25",
    "facility_per_gpu_hour": "1.90",
    "gpu_average_power_kw": "0.35",
    "reserved_inference_share": "0.50",
}
