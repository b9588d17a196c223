"""View decorators for the pages people browse (the API has its permission classes)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from access.selectors import has_any_role

View = Callable[..., HttpResponse]


def role_required(view: View) -> View:
    """Logged in (else to the login page) and holding a Tandem role (else 403, a page that
    says whom to ask): an account with no role sees nothing, not an empty page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not has_any_role(request.user):
            return render(request, "dashboards/no_role.html", {"title": "No access"}, status=403)
        return view(request, *args, **kwargs)

    return login_required(wrapper)
