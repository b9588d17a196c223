"""Rows other apps store with a period close, inside its transaction: an explicit hook.

Billing sits below reports (dashboards > reports > billing > metering) and never imports it.
An app that must freeze something of its own with a month's statements (the monthly report's
health numbers) registers a hook from its `AppConfig.ready()`. `period_close` calls each
hook's `read` while it reads metering, so the hook sees the same committed state the
statements are priced from, and its `store` inside the transaction that stores the close:
if either raises, nothing of the close is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from billing.models import PeriodClose, PriceBook
    from billing.selectors import PeriodBounds


@dataclass(frozen=True)
class PeriodCloseHook:
    name: str
    read: Callable[[PeriodBounds, PriceBook], object]  # metering read, before the close exists
    store: Callable[[PeriodClose, object], None]  # in the close's transaction


_HOOKS: dict[str, PeriodCloseHook] = {}


def period_close_hook_register(hook: PeriodCloseHook) -> None:
    """Register (or replace, by name: `ready()` may run twice) a hook of every later close."""
    _HOOKS[hook.name] = hook


def period_close_hooks() -> list[PeriodCloseHook]:
    return list(_HOOKS.values())
