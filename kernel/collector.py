"""Python's cyclic garbage collector held off while a batch of ingest or a month's close
builds its records.

Both build millions of small objects (labels, points, rationals, tuples) that live until the
batch or the close ends, none in a reference cycle (reference counting frees them), and every
allocation counts towards the next automatic collection, which walks every object made so
far: at 10,000 GPUs that was half an ingest batch's time, and a 1,000-GPU month's close ran
about ten full collections. Pausing adds nothing to the peak; the few cycles made meanwhile
(error tracebacks) are collected as usual once the outermost pause ends.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}


@contextmanager
def collector_held() -> Iterator[None]:
    """The collector off inside, back as it was when the outermost hold ends (holds nest,
    across threads too: the collector is one per process)."""
    with _lock:
        _state["depth"] += 1
        if _state["depth"] == 1:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()


def collector_paused(function: Callable[P, R]) -> Callable[P, R]:
    """`function` run inside `collector_held`."""

    @functools.wraps(function)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_held():
            return function(*args, **kwargs)

    return paused
