from django.urls import path, re_path

from kernel.period import PERIOD_URL_PATTERN
from reports import views

app_name = "reports"

PERIOD = rf"(?P<period>{PERIOD_URL_PATTERN})"

urlpatterns = [
    path("", views.run_list, name="runs"),
    re_path(rf"^{PERIOD}/$", views.report_page, name="page"),
    re_path(rf"^{PERIOD}/runs/$", views.run_create, name="run_create"),
    path("runs/<int:run_id>/files/<str:name>", views.file_download, name="file"),
    path("statement-lines/<int:line_id>/explain/", views.explain_line, name="explain"),
]
