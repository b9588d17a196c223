"""Turn the real exporters' text samples (tests/fixtures/exposition) into OpenMetrics that
promtool can back-fill: every sample repeated at each scrape tick, with the target labels a
scrape would add, plus a few hand-made series for the edge cases (NaN, negative, no namespace,
a label value with quotes and backslashes)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
# A label value with a quote and a backslash, as OpenMetrics escapes it and as Python sees it.
WEIRD_CLUSTER_ESCAPED = 'we\\"ird\\\\cluster'
WEIRD_CLUSTER = 'we"ird\\cluster'

# Target labels a Kubernetes scrape adds, per sample file.
TARGETS = {
    "dcgm-exporter": 'job="dcgm-exporter",instance="10.0.0.7:9400"',
    "vllm": 'job="vllm",instance="10.0.1.9:8000",namespace="serving",pod="opt-125m-0"',
    "cadvisor": 'job="cadvisor",instance="10.0.0.7:8080"',
    "tgi": 'job="tgi",instance="10.0.1.10:80"',
    "nvidia-triton": 'job="triton",instance="10.0.1.11:8002"',
}

# The real dcgm-exporter FB_USED line of the T4, as a newer build on another node writes it
# (`hostname`) with the pod attribution Prometheus stores as exported_* under
# `honor_labels: false` (the pod labels are the sample's own: ray-llm/ray-1111111), holding
# the T4's whole framebuffer (15109 MiB, the sample's FB_TOTAL).
VARIANT_FB_USED = (
    'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5",'
    'device="nvidia0",modelName="Tesla T4",hostname="551bdf382151",'
    'exported_container="ray-worker",exported_namespace="ray-llm",exported_pod="ray-1111111",'
    'job="dcgm-exporter",instance="10.0.0.8:9400"} 15109'
)
VARIANT_MIB = 15109

EDGE_SERIES = (
    # (FB_USED labels, value): one good pod, and one of each bad kind.
    ('UUID="GPU-edge-1",gpu="0",exported_pod="good-0",exported_namespace="edge"', "1024"),
    ('UUID="GPU-edge-2",gpu="1",pod="nan-0",namespace="edge"', "NaN"),
    ('UUID="GPU-edge-3",gpu="2",pod="negative-0",namespace="edge"', "-5"),
    ('UUID="GPU-edge-4",gpu="3",pod="orphan-0"', "10"),
)


def sample_lines(fixtures_dir: Path) -> list[str]:
    """Every sample of the real exposition files, timestamps dropped, target labels added."""
    lines = []
    for stem, target in TARGETS.items():
        text = (fixtures_dir / "exposition" / f"{stem}.txt").read_text()
        for raw in text.splitlines():
            match = SAMPLE.match(raw.strip())
            if raw.startswith("#") or not match:
                continue
            labels = f"{match['labels']},{target}" if match["labels"] else target
            lines.append(f"{match['name']}{{{labels}}} {match['value']}")
    return lines


def edge_lines(*, good_pod: bool = True) -> list[str]:
    lines = [VARIANT_FB_USED]
    for labels, value in EDGE_SERIES:
        if labels.startswith('UUID="GPU-edge-1"') and not good_pod:
            continue
        lines.append(
            f'DCGM_FI_DEV_FB_USED{{{labels},cluster="{WEIRD_CLUSTER_ESCAPED}",'
            f'job="dcgm-exporter",instance="10.0.0.9:9400"}} {value}'
        )
    return lines


def write_openmetrics(
    path: Path, ticks: Iterable[int], lines_at: dict[int, list[str]] | list[str]
) -> None:
    """One copy of the lines at every tick (or per-tick lines), then `# EOF`."""
    with open(path, "w", encoding="utf-8") as out:
        for tick in ticks:
            lines = lines_at[tick] if isinstance(lines_at, dict) else lines_at
            for line in lines:
                out.write(f"{line} {tick}\n")
        out.write("# EOF\n")
