"""Work lost to a preemption (docs/pricing.md rule 6, "Preemption compensation").

The GPU-seconds an exporter reported as lost, or, when none were reported (exporters do not
report lost work today), `min(starvation_lost_work_cap_seconds, seconds_since_start) * gpus`.

The rule is written once, over three operations a caller may replace: Python evaluates it on
numbers (the pricing engine, the task page), and the database evaluates the same rule when a
selector passes query expressions (`Coalesce`, `Least`, `F(...)`) so that sums over a month of
preemptions stay in SQL. Either way the formula, and the order of its arguments, are this one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def lost_gpu_seconds(
    *,
    reported: Any,
    seconds_since_start: Any,
    gpus: Any,
    cap_seconds: Any,
    reported_else: Callable[[Any, Any], Any] | None = None,
    least: Callable[[Any, Any], Any] = min,
) -> Any:
    """The lost work of one preemption: `reported` when it is known, else
    `least(cap_seconds, seconds_since_start) * gpus`.

    Without `reported_else` this is plain Python on Decimals and ints, and the assumed loss
    is computed only when nothing was reported (the engine's context traps inexact products).
    A selector passes `reported_else=Coalesce`-like and `least=Least` with column
    expressions to get the same rule as SQL.
    """

    def assumed() -> Any:
        return least(cap_seconds, seconds_since_start) * gpus

    if reported_else is None:
        return assumed() if reported is None else reported
    return reported_else(reported, assumed())
