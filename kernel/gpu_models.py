"""GPU model names as dcgm-exporter writes them (`modelName`, NVML's device name), compared by
what they name: the same hardware is written differently across driver versions and
platforms ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"). Metering (MIG slices per model) and
billing (GPU classes) compare them alike."""

from __future__ import annotations

# The prefix NVML writes before a GPU's name in newer drivers ("NVIDIA H100 80GB HBM3"; older
# ones and some platforms write "H100 80GB HBM3"), lower-cased as `gpu_model_key` compares it.
NVIDIA_PREFIX = "nvidia "


def gpu_model_key(model: str) -> str:
    """What a model is matched by (docs/pricing.md "GPU classes"): the name without the
    "NVIDIA " prefix, runs of whitespace as one space, case folded. dcgm-exporter writes
    NVML's device name, which differs across driver versions and platforms for the same
    hardware, and a node upgraded mid-month changes spelling from then on: compared exactly,
    its GPUs fell to `default`'s rates without a word."""
    key = " ".join(model.split()).casefold()
    return key.removeprefix(NVIDIA_PREFIX)
