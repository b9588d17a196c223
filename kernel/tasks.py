"""Task kinds (docs/pricing.md "Tasks"): what a task is, and which kinds count as training.

Inference is priced against its reserve and judged by its latency objective; the training
kinds pay the off-peak rate outside peak hours and are compensated for preemptions.
"""

from __future__ import annotations

INFERENCE = "inference"
# In the order pages and files list them; the labels are what a finance reader sees.
TASK_KIND_LABELS: dict[str, str] = {
    INFERENCE: "Inference",
    "training_interactive": "Training (interactive)",
    "training_batch": "Training (batch)",
    "preprocessing": "Preprocessing",
}
TASK_KINDS: tuple[str, ...] = tuple(TASK_KIND_LABELS)
# Django's `choices` for a kind column: the same kinds, with their labels.
TASK_KIND_CHOICES: list[tuple[str, str]] = list(TASK_KIND_LABELS.items())
TRAINING_KINDS: tuple[str, ...] = tuple(kind for kind in TASK_KINDS if kind != INFERENCE)
# Kinds whose work can be paused and resumed without a person waiting on it: the work time
# slicing and preemption can move around. Interactive training has someone at the keyboard.
INTERRUPTIBLE_KINDS: tuple[str, ...] = ("training_batch", "preprocessing")


def is_training(kind: str) -> bool:
    """True for every kind but inference (docs/pricing.md: the off-peak rate applies)."""
    return kind in TRAINING_KINDS
