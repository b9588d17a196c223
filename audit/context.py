"""Who is acting right now, for services that record audit entries without a `user` argument.

The middleware sets the request's user for the length of a request; the admin mixin marks the
span in which it records an entry itself, so the services it calls do not record a second one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from django.http import HttpRequest

_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)
_recorded_by_caller: ContextVar[bool] = ContextVar("audit_recorded_by_caller", default=False)


def current_user() -> object | None:
    request = _request.get()
    user = getattr(request, "user", None) if request is not None else None
    return user if user is not None and user.is_authenticated else None


@contextlib.contextmanager
def request_scope(request: HttpRequest) -> Iterator[None]:
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


@contextlib.contextmanager
def recorded_by_caller() -> Iterator[None]:
    """Inside, services do not record: the caller (the admin) writes one fuller entry."""
    token = _recorded_by_caller.set(True)
    try:
        yield
    finally:
        _recorded_by_caller.reset(token)


def services_should_record() -> bool:
    return not _recorded_by_caller.get()
