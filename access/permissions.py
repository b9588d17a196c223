"""Who may call an API view: a person with a role, or a token with the view's scope."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework import permissions

from access.models import SCOPE_READ, ApiToken
from access.selectors import has_any_role

if TYPE_CHECKING:  # DRF's views import these modules through its settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class HasRoleAndScope(permissions.BasePermission):
    """Authenticated, with a Tandem role; for tokens also the view's `required_scope`.

    What the caller then sees is narrowed by `visible_teams`: a team lead asking for another
    team's object gets 404 from the view's queryset, never 403 from here.
    """

    message = "You need a Tandem role (finance, platform or team lead) to use the API."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not has_any_role(request.user):
            return False
        if isinstance(request.auth, ApiToken):
            required = getattr(view, "required_scope", SCOPE_READ)
            if required not in request.auth.scopes:
                self.message = f"This token lacks the '{required}' scope."
                return False
        return True
