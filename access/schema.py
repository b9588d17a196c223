"""How the OpenAPI schema describes Tandem's token authentication."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "access.authentication.BearerTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (`manage.py api_token_create`), scopes read, quota:read.",
        }


class ApiSchema(AutoSchema):
    """drf-spectacular's schema plus the error answers every Tandem endpoint can give.

    Errors share one shape, a JSON object naming the offending parameter (400) or carrying a
    `detail` (401, 403, 404, 429), so clients and schema-driven tests know them in advance.
    """

    ERRORS = {
        "400": "A query parameter is wrong; the body names it.",
        "401": "No credentials, or an unknown or revoked token.",
        "403": "No Tandem role, or a token without the scope this endpoint needs.",
        "404": "No such object among the teams you can see, or no such page.",
        "429": "Too many requests from this token; retry after the Retry-After seconds.",
    }

    def _get_response_bodies(self, direction: str = "response") -> dict:
        # Private in drf-spectacular 0.28 (pinned): the one place that sees every response code.
        responses = super()._get_response_bodies(direction)
        media_types = self.map_renderers("media_type") or ["application/json"]
        for code, description in self.ERRORS.items():
            body = (
                {"type": "object", "additionalProperties": {}}
                if "json" in media_types[0]
                else {"type": "string"}
            )
            responses.setdefault(
                code,
                {
                    "description": description,
                    "content": {media_types[0]: {"schema": body}},
                },
            )
        return responses
