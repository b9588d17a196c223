"""`Authorization: Bearer <token>` for machines; people use the session."""

from __future__ import annotations

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from access.models import ApiToken
from access.selectors import api_token_by_plain
from access.services import api_token_mark_used


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[object, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None  # not ours: let the session try
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization must be 'Bearer <token>'.")
        try:
            plain = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.") from None
        token = api_token_by_plain(plain)
        if token is None or not token.owner.is_active:
            # One answer for unknown, revoked and disabled-owner tokens: nothing to probe.
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        api_token_mark_used(token=token)
        return token.owner, token

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (with this challenge) rather than 403 to anonymous callers.
        return self.keyword
