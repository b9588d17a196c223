"""Login throttled per username and client address, for the login page and the admin's.

After TANDEM_LOGIN_MAX_FAILURES failed logins for one username (NFKC-normalised and
case-folded, so look-alikes count as one) from one client address (behind a trusted proxy,
the client's: see `client_address`) within TANDEM_LOGIN_WINDOW_SECONDS, the form refuses
with "too many attempts" (the login page also answers 429) and does not check the password
at all, so guessing goes no further. A successful login clears the count. The counters live
in Django's cache (Redis via CACHE_URL when several web workers run, so every worker sees the
same count).
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Address, IPv6Network, ip_address

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse

TOO_MANY = "Too many attempts: wait a few minutes before trying again."
THROTTLED = "throttled"


def login_username_key(username: str) -> str:
    """The username as the throttle counts it: look-alikes ("victor" in full-width letters,
    "Victor", "victor ") are one name, so none of them gets fresh attempts."""
    return unicodedata.normalize("NFKC", username).casefold().strip()


def _trusted(address: str, proxies: Sequence[IPv4Network | IPv6Network]) -> bool:
    try:
        parsed = ip_address(address)
    except ValueError:
        return False
    # A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d.
    if isinstance(parsed, IPv6Address) and parsed.ipv4_mapped:
        parsed = parsed.ipv4_mapped
    return any(parsed in network for network in proxies)


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, unless that is a trusted proxy
    (TANDEM_TRUSTED_PROXIES); then the right-most address of X-Forwarded-For that is not one.

    Addresses to its left were written by the client itself and prove nothing; when every
    hop is a trusted proxy, the request began inside, at the left-most one.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.TANDEM_TRUSTED_PROXIES
    if not proxies or not _trusted(remote, proxies):
        return remote
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            return hop
    return hops[0] if hops else remote


def login_failures_key(*, username: str, address: str) -> str:
    # Hashed: keys stay short and valid for every cache backend whatever the username holds.
    digest = hashlib.sha256(f"{login_username_key(username)}\0{address}".encode()).hexdigest()
    return f"login-failures:{digest}"


def _count_failure(key: str) -> None:
    window = settings.TANDEM_LOGIN_WINDOW_SECONDS
    # add() starts the window on the first failure; incr() never extends it.
    if not cache.add(key, 1, timeout=window):
        try:
            cache.incr(key)
        except ValueError:  # expired between add() and incr()
            cache.add(key, 1, timeout=window)


class ThrottledFormMixin:
    """Checks the failure count before `authenticate` runs, and counts failures."""

    def clean(self) -> dict:
        username = str(self.data.get("username", ""))[:150]
        address = client_address(self.request) if self.request else ""
        key = login_failures_key(username=username, address=address)
        if (cache.get(key) or 0) >= settings.TANDEM_LOGIN_MAX_FAILURES:
            raise ValidationError(TOO_MANY, code=THROTTLED)
        try:
            cleaned = super().clean()
        except ValidationError:
            _count_failure(key)
            raise
        if self.get_user() is not None:  # only a real success clears, not a blank password
            cache.delete(key)
        return cleaned


class ThrottledAuthenticationForm(ThrottledFormMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledFormMixin, AdminAuthenticationForm):
    pass


class ThrottledLoginView(auth_views.LoginView):
    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if any(e.code == THROTTLED for e in form.errors.as_data().get("__all__", [])):
            response.status_code = 429
        return response
