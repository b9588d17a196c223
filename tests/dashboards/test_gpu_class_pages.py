"""Statement pages list a line's GPU classes when it has any but `default`."""

from __future__ import annotations

import pytest
from django.urls import reverse

from billing.models import StatementLine
from billing.services import period_close
from tests.billing.conftest import classes_close, default_book, worked_example  # noqa: F401
from tests.dashboards.conftest import make_user

pytestmark = pytest.mark.django_db


def nlp_standard(close) -> StatementLine:
    return StatementLine.objects.get(
        statement__period_close=close, statement__team__name="nlp", kind="standard"
    )


def test_it_lists_each_lines_classes_on_the_statement(client, classes_close):  # noqa: F811
    client.force_login(make_user("fiona", "finance"))
    line = nlp_standard(classes_close)

    html = client.get(
        reverse("dashboards:statement_detail", args=["2026-10", line.statement.team_id])
    ).content.decode()

    # nlp: off-peak in H100 and default, standard in all three, compensation in two.
    assert html.count('class="class-part"') == 7
    assert 'data-class="L40S"' in html
    assert "42.6740" in html  # H100's standard rate
    assert "11.4370" in html  # L40S's


def test_it_shows_a_lines_classes_on_its_page(client, classes_close):  # noqa: F811
    client.force_login(make_user("fiona", "finance"))

    html = client.get(
        reverse("dashboards:statement_line", args=[nlp_standard(classes_close).pk])
    ).content.decode()

    assert 'data-table="classes"' in html
    for name, hours in (("H100", "8.43"), ("L40S", "3.42"), ("default", "3.74")):
        assert f'<tr data-class="{name}"><td>{name}</td><td class="num">{hours}</td>' in html


def test_it_keeps_todays_statement_for_a_month_without_classes(client, worked_example):  # noqa: F811
    close = period_close(period="2026-10").period_close
    client.force_login(make_user("fiona", "finance"))
    line = nlp_standard(close)

    statement = client.get(
        reverse("dashboards:statement_detail", args=["2026-10", line.statement.team_id])
    ).content.decode()
    page = client.get(reverse("dashboards:statement_line", args=[line.pk])).content.decode()

    assert "class-part" not in statement
    assert 'data-table="classes"' not in page
    assert 'data-table="lines"' in statement
