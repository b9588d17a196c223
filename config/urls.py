from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from audit.login import ThrottledLoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        ThrottledLoginView.as_view(template_name="dashboards/login.html", next_page="/"),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("api/v1/", include("config.api_urls")),
    path("reports/", include("reports.urls")),
    path("", include("dashboards.urls")),
]
