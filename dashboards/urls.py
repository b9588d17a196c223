from django.urls import path

from dashboards import views

app_name = "dashboards"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("utilization/", views.utilization, name="utilization"),
    path("teams/", views.team_list, name="teams"),
    path("teams/<int:team_id>/", views.team_detail, name="team"),
    path("tasks/<int:task_id>/", views.task_detail, name="task"),
    path("sla/", views.sla, name="sla"),
    path("statements/", views.statement_list, name="statements"),
    path("statements/<str:period>/", views.statement_period, name="statement_period"),
    path(
        "statements/<str:period>/teams/<int:team_id>/",
        views.statement_detail,
        name="statement_detail",
    ),
    path("statement-lines/<int:line_id>/", views.statement_line, name="statement_line"),
    path("price-books/", views.price_books, name="price_books"),
]
