"""Per-client throttling: each API token has its own budget (rate `api_token`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from access.models import ApiToken

if TYPE_CHECKING:  # DRF's views import these modules through its settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class ApiTokenRateThrottle(SimpleRateThrottle):
    scope = "api_token"

    def get_rate(self) -> str | None:
        # Read at call time, not import time, so a changed setting takes effect.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not isinstance(request.auth, ApiToken):
            return None  # people on a session are not throttled here
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
