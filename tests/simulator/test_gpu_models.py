"""The mixed pool option: nodes of three GPU models, MIG and time-slicing where the model has
them, `modelName` on every dcgm-exporter series, and truth.json's amounts per model adding up
to its totals; the default (uniform) pool stays all H100."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from simulator.config import PoolConfig, SimulatorConfigError
from simulator.pool import simulate
from simulator.truth import load_truth

MIXED = PoolConfig(
    gpus=9,
    days=1,
    start=dt.date(2026, 9, 30),
    seed=5,
    scrape_interval_seconds=300,
    step_seconds=300,
    gpu_models="mixed",
)
H100, A100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"
DCGM_UUID_MODEL = re.compile(r'^DCGM_FI_\w+\{.*UUID="([^"]+)".*modelName="([^"]+)"')


def test_it_lays_out_a_mixed_pool_with_every_model_mig_and_time_slicing(tmp_path: Path) -> None:
    result = simulate(MIXED, tmp_path)
    truth = load_truth(result.truth_path)

    gpus = [gpu for node in truth["meta"]["nodes"] for gpu in node["gpus"]]
    modes = defaultdict(set)
    for gpu in gpus:
        modes[gpu["modelName"]].add(gpu["mode"])
    assert modes == {
        H100: {"whole", "mig", "timesliced"},
        A100: {"whole", "mig", "timesliced"},
        L40S: {"whole", "timesliced"},  # an L40S has no MIG
    }
    # Every dcgm-exporter series names its GPU's model (MIG instances their parent's).
    model_of = {gpu["UUID"]: gpu["modelName"] for gpu in gpus}
    seen = {}
    dcgm_lines = 0
    with open(result.metrics_path, encoding="utf-8") as metrics:
        for line in metrics:
            if line.startswith("DCGM_FI_"):
                dcgm_lines += 1
                match = DCGM_UUID_MODEL.match(line)
                assert match, line
                seen[match[1]] = match[2]
    assert dcgm_lines > 1000
    assert seen == model_of

    # Per model, capacity and each task's allocation add up to the totals (to the rounding of
    # each interval's amounts to 6 places).
    for interval, total in truth["capacity"].items():
        parts = [values.get(interval, "0") for values in truth["capacity_by_model"].values()]
        assert sum(map(Decimal, parts)) == Decimal(total), interval
    for task_id, task in truth["tasks"].items():
        for interval, total in task["alloc_gpu_seconds"].items():
            by_model = task["alloc_gpu_seconds_by_model"].values()
            parts = sum(Decimal(values.get(interval, "0")) for values in by_model)
            assert abs(parts - Decimal(total)) <= Decimal("0.000002"), (task_id, interval)
    assert set(truth["capacity_by_model"]) == {H100, A100, L40S}


def test_it_keeps_the_uniform_pool_all_h100(tmp_path: Path) -> None:
    config = PoolConfig(gpus=8, days=1, start=dt.date(2026, 9, 30), seed=5, step_seconds=300)
    truth = load_truth(simulate(config, tmp_path).truth_path)

    models = {gpu["modelName"] for node in truth["meta"]["nodes"] for gpu in node["gpus"]}
    assert models == {H100}
    assert list(truth["capacity_by_model"]) == [H100]


def test_it_refuses_an_unknown_gpu_model_mix() -> None:
    with pytest.raises(SimulatorConfigError, match="--gpu-models"):
        PoolConfig(gpus=8, days=1, start=dt.date(2026, 9, 30), gpu_models="rainbow")
