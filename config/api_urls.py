"""The REST API, mounted at /api/v1/ by config/urls.py. OpenAPI 3 schema at /api/v1/schema/."""

from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

from billing import apis as billing
from reports import apis as reports


def not_found(request: HttpRequest, path: str) -> JsonResponse:
    """Unknown API paths answer JSON like the rest of the API, not Django's HTML page."""
    return JsonResponse({"detail": f"No API endpoint at /api/v1/{path[:200]}."}, status=404)


urlpatterns = [
    path("teams/", reports.TeamListApi.as_view(), name="api-teams"),
    path("teams/<int:pk>/", reports.TeamDetailApi.as_view(), name="api-team"),
    path("tasks/", reports.TaskListApi.as_view(), name="api-tasks"),
    path("tasks/<int:pk>/", reports.TaskDetailApi.as_view(), name="api-task"),
    path("usage/", reports.UsageApi.as_view(), name="api-usage"),
    path("health/", reports.HealthApi.as_view(), name="api-health"),
    path("sharing/", reports.SharingApi.as_view(), name="api-sharing"),
    path("statements/", billing.StatementListApi.as_view(), name="api-statements"),
    path("statements/<int:pk>/", billing.StatementDetailApi.as_view(), name="api-statement"),
    path("price-books/", billing.PriceBookListApi.as_view(), name="api-price-books"),
    path("price-books/<int:pk>/", billing.PriceBookDetailApi.as_view(), name="api-price-book"),
    path("quotas/export/", billing.QuotaExportApi.as_view(), name="api-quota-export"),
    path("quotas/metrics/", billing.QuotaMetricsApi.as_view(), name="api-quota-metrics"),
    # The schema describes the API, not anyone's data: readable without a role.
    path(
        "schema/",
        SpectacularAPIView.as_view(permission_classes=[AllowAny], authentication_classes=[]),
        name="api-schema",
    ),
    re_path(r"^(?P<path>[\s\S]*)$", not_found, name="api-not-found"),  # newlines too
]
