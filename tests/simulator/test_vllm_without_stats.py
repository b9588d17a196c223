"""vLLM started with --disable-log-stats (`--vllm-without-stats MODEL`): its replicas write no
`vllm:*` series while Prometheus' `up` of their targets says they answered; the other
services write theirs as before. The pool's truth counts the requests all the same."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from simulator.config import PoolConfig, SimulatorConfigError
from simulator.pool import Pool

HOUR = PoolConfig(gpus=16, days=1, start=dt.date(2026, 10, 6), seed=7, scrape_interval_seconds=60)
SILENT = "llama3-8b-chat"


def first_hour(config: PoolConfig) -> tuple[Pool, list[str]]:
    pool = Pool(config)
    lines: list[str] = []
    for tick in list(config.ticks())[:60]:
        lines += pool.step(tick)
    return pool, lines


def test_it_writes_targets_that_answer_without_the_histogram() -> None:
    pool, lines = first_hour(replace(HOUR, vllm_without_stats=(SILENT,)))
    histogram = [line for line in lines if line.startswith("vllm:")]
    up = [line for line in lines if line.startswith('up{job="vllm"')]
    assert histogram and not any(f'model_name="{SILENT}"' in line for line in histogram)
    served = {service.model_name: service for service in pool.services}
    for service in served.values():
        for replica in service.pods:
            if replica.devices:
                target = f'up{{job="vllm",instance="{replica.pod_ip}:8000",'
                assert any(line.startswith(target) and line.endswith(" 1") for line in up)
    assert served[SILENT].increments, "its requests are served and counted all the same"


def test_it_writes_no_vllm_target_by_default() -> None:
    _, lines = first_hour(HOUR)
    assert not any(line.startswith('up{job="vllm"') for line in lines)
    assert any(f'model_name="{SILENT}"' in line for line in lines if line.startswith("vllm:"))


def test_it_refuses_a_model_the_pool_does_not_serve_naming_those_it_does() -> None:
    with pytest.raises(SimulatorConfigError, match="'gpt-9' is not one of llama3-8b-chat, mis"):
        Pool(replace(HOUR, vllm_without_stats=("gpt-9",)))
