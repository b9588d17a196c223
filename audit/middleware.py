"""Makes the request's user the actor of audit entries written while the request runs."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from audit.context import request_scope

Middleware = Callable[[HttpRequest], HttpResponse]


class AuditActorMiddleware:
    def __init__(self, get_response: Middleware) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with request_scope(request):
            return self.get_response(request)


class RefuseNulBytesMiddleware:
    """400 for a NUL byte in the path or the query string.

    No Tandem input can hold one (PostgreSQL refuses NUL in text), and views that look a
    path or query value up in the database would otherwise fail with a 500. Form fields are
    covered by Django's own ProhibitNullCharactersValidator; the API validates its own
    parameters and answers JSON naming the parameter, so it is left alone.
    """

    api_prefix = "/api/"

    def __init__(self, get_response: Middleware) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(self.api_prefix):
            return self.get_response(request)
        if "\x00" in request.path or any(
            "\x00" in key or any("\x00" in value for value in values)
            for key, values in request.GET.lists()
        ):
            return HttpResponseBadRequest(
                "The address holds a NUL byte.", content_type="text/plain"
            )
        return self.get_response(request)
