"""`manage.py simulate_pool`: a thin wrapper; nonsense arguments stop it with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

REPO = Path(__file__).resolve().parents[2]


def test_it_writes_metrics_and_truth(tmp_path):
    call_command(
        "simulate_pool",
        "--gpus=3",
        "--days=1",
        "--start=2026-10-01",
        "--seed=4",
        "--scrape-interval=300",
        "--step=900",
        "--silent-exporter=gpu-node-02,2026-09-30T18:00:00Z,1800",
        "--silent-exporter=gpu-node-01,2026-09-30T20:00:00Z,600,gone",
        f"--out={tmp_path / 'new'}",
    )

    meta = json.loads((tmp_path / "new" / "truth.json").read_text())["meta"]
    assert meta["start"] == "2026-09-30T16:00:00Z"  # 00:00 in Asia/Shanghai
    assert (meta["gpus"], meta["scrape_interval_seconds"], meta["step_seconds"]) == (3, 300, 900)
    assert (tmp_path / "new" / "metrics.om").read_text().endswith("# EOF\n")
    assert meta["silent_exporters"] == [
        {
            "node": "gpu-node-02",
            "start": "2026-09-30T18:00:00Z",
            "seconds": 1800,
            "gone": False,
            "maintenance": False,
        },
        {
            "node": "gpu-node-01",
            "start": "2026-09-30T20:00:00Z",
            "seconds": 600,
            "gone": True,
            "maintenance": False,
        },
    ]
    metrics = (tmp_path / "new" / "metrics.om").read_text()
    # 18:00 and 18:25 fall in the silence: Prometheus' up is 0 for that node's exporter.
    silent_up = 'up{job="dcgm-exporter",instance="10.42.0.12:9400"} 0'
    assert f"{silent_up} {1790791200}" in metrics and f"{silent_up} {1790791200 + 1500}" in metrics
    assert metrics.count(silent_up) == 6  # 1800 s at a 300 s scrape
    # The gone target has no `up` at all for 600 s (2 scrapes), and kube-state-metrics lists
    # its node throughout (288 ticks of a day).
    gone_up = 'up{job="dcgm-exporter",instance="10.42.0.11:9400"} '
    assert metrics.count(gone_up) == 288 - 2
    assert f"{gone_up}1 {1790798400}" not in metrics
    assert f"{gone_up}1 {1790798400 + 600}" in metrics
    listed = 'kube_node_status_capacity{job="kube-state-metrics",instance="10.42.0.5:8080",'
    assert metrics.count(f'{listed}node="gpu-node-01",resource="nvidia_com_gpu"') == 288


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--gpus=0"], "--gpus"),
        (["--days=-1"], "--days"),
        (["--start=2026-02-30"], "--start"),
        (["--step=100"], "--step"),
        (["--scrape-interval=0"], "--scrape-interval"),
        (["--timezone=Mars/Olympus"], "--timezone"),
        (["--out=/proc/simulated"], "--out"),
        (["--silent-exporter=gpu-node-09,2026-10-01T02:00:00Z,600"], "--silent-exporter"),
        (["--silent-exporter=gpu-node-01,yesterday,600"], "--silent-exporter"),
        (["--silent-exporter=gpu-node-01,2026-10-01T02:00:00Z"], "--silent-exporter"),
        (["--silent-exporter=gpu-node-01,2026-10-01T02:00:00Z,600,gne"], "--silent-exporter"),
    ],
)
def test_it_refuses_nonsense_with_one_line(tmp_path, arguments, named):
    defaults = {"--gpus": "8", "--days": "1", "--start": "2026-10-01", "--out": str(tmp_path)}
    for argument in arguments:
        key, value = argument.split("=", 1)
        defaults[key] = value
    with pytest.raises(CommandError) as error:
        call_command("simulate_pool", *[f"{k}={v}" for k, v in defaults.items()])
    message = str(error.value)
    assert named in message and "\n" not in message
    assert not (tmp_path / "metrics.om").exists()


def test_it_exits_non_zero_from_the_shell(tmp_path):
    command = [sys.executable, "manage.py", "simulate_pool", "--gpus", "0", "--days", "1"]
    command += ["--start", "2026-10-01", "--out", str(tmp_path)]
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env=os.environ.copy(), check=False
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--gpus" in lines[0]
