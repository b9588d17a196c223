"""The OpenAPI schema: complete, valid, warning-free; and schemathesis finds no 500 against it."""

from __future__ import annotations

import io

import pytest
import schemathesis
from django.core import signals
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from access.services import api_token_create
from config import api_urls
from tests.factories import RoleFactory

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
# Fuzz our endpoints (the schema view is drf-spectacular's own) through the real WSGI app.
fuzzed = schemathesis.openapi.from_dict(SCHEMA).exclude(path="/api/v1/schema/")
fuzzed.app = get_wsgi_application()


def test_it_generates_the_schema_without_warnings(db, tmp_path):
    target = tmp_path / "schema.yaml"
    call_command(
        "spectacular",
        "--validate",
        "--fail-on-warn",
        "--file",
        str(target),
        stderr=io.StringIO(),
    )
    assert "/api/v1/quotas/export/" in target.read_text()


def test_it_serves_the_schema_with_every_path_and_the_token_scheme(db, client):
    response = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    schema = response.json()
    documented = set(schema["paths"])
    routes = {
        "/api/v1/" + str(pattern.pattern).replace("<int:pk>", "{id}")
        for pattern in api_urls.urlpatterns
        if pattern.name != "api-not-found"
    }
    assert routes == documented
    assert schema["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"


@pytest.fixture
def fuzz_client(api_pool, settings):
    """A finance token with both scopes: the widest view, so every operation is reached."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {}}
    owner = RoleFactory(user__username="fuzz", name="finance").user
    _, plain = api_token_create(owner=owner, name="fuzz", scopes=["read", "quota:read"])
    return {"Authorization": f"Bearer {plain}"}


@pytest.fixture
def keep_test_connection():
    """Requests must not close the test's database connection when they finish (Django's own
    test client makes the same exception)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@fuzzed.parametrize()
@hypothesis_settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_it_never_answers_500_to_generated_requests(case, fuzz_client, keep_test_connection):
    # Every check but two about strictness: the schema cannot say that `end` must follow
    # `start` (a schema-valid request may rightly get a 400), and DRF's pagination reads a
    # garbled `page` as the first page rather than refusing it.
    case.call_and_validate(
        headers=fuzz_client,
        excluded_checks=[
            schemathesis.checks.positive_data_acceptance,
            schemathesis.checks.negative_data_rejection,
        ],
    )
