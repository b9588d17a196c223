"""A month priced in several GPU classes: the team CSV lists each line's classes, the FOCUS
1.2 file has a row per class with the class as its SKU, adding up to the statements."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import Statement, StatementLine, StatementLineClass
from billing.services import period_close
from reports.render_csv import csv_bytes
from reports.render_focus import FOCUS_MANDATORY_COLUMNS, FOCUS_VERSION, focus_csv
from reports.rows import TEAM_CSV_HEADER, team_csv_rows, team_statements
from reports.services import report_pdf
from tests.billing.conftest import classes_close, default_book, worked_example  # noqa: F401
from tests.dashboards.conftest import make_user
from tests.reports.test_pdf import pdf_text

pytestmark = pytest.mark.django_db


def read_csv(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def test_it_writes_every_mandatory_focus_column(classes_close):  # noqa: F811
    header = next(csv.reader(io.StringIO(focus_csv(classes_close).decode("utf-8"))))

    assert FOCUS_VERSION == "1.2"
    assert [column for column in FOCUS_MANDATORY_COLUMNS if column not in header] == []
    assert {"SkuId", "SkuPriceId", "SkuPriceDetails", "SkuMeter"} <= set(header)


def test_it_writes_a_focus_row_per_class_summing_to_each_line(classes_close):  # noqa: F811
    rows = read_csv(focus_csv(classes_close))
    lines = StatementLine.objects.filter(statement__period_close=classes_close)

    for line in lines:
        charged = [row for row in rows if row["x_StatementLineId"] == str(line.pk)]
        assert sum(Decimal(row["BilledCost"]) for row in charged) == line.amount, line
        classes = [part.gpu_class for part in line.class_parts]
        if classes:
            assert [row["SkuId"] for row in charged] == classes, line
    for statement in Statement.objects.filter(period_close=classes_close):
        team = [row for row in rows if row["SubAccountId"] == statement.team.name]
        assert sum(Decimal(row["BilledCost"]) for row in team) == statement.total


def test_it_names_the_class_models_and_rate_in_the_sku(classes_close):  # noqa: F811
    rows = read_csv(focus_csv(classes_close))
    nlp_standard = {
        row["SkuId"]: row
        for row in rows
        if row["SubAccountId"] == "nlp" and row["x_LineKind"] == "standard"
    }

    assert sorted(nlp_standard) == ["H100", "L40S", "default"]
    h100 = nlp_standard["H100"]
    assert json.loads(h100["SkuPriceDetails"]) == {
        "x_GpuClass": "H100",
        "x_GpuModels": ["NVIDIA H100 80GB HBM3"],
        "x_RatePerGpuHour": "42.674",
        # classes-expected.json: 191.67 GPU-hours of H100 in the month's 744 hours.
        "x_CapacityGpuHours": "191.67",
        "x_AverageGpuCount": "0.26",
    }
    assert h100["SkuPriceId"] == "v2/H100/standard"
    assert h100["PricingUnit"] == "GPU-Hours"
    # Standard usage is billed at list price, class by class.
    assert h100["ListCost"] == h100["BilledCost"]


def test_it_prices_off_peak_list_cost_at_the_classes_standard_rate(classes_close):  # noqa: F811
    rows = read_csv(focus_csv(classes_close))
    (h100,) = [
        row
        for row in rows
        if row["SubAccountId"] == "vision" and row["x_LineKind"] == "offpeak"
        if row["SkuId"] == "H100"
    ]

    hours = Decimal(h100["PricingQuantity"])
    assert Decimal(h100["ListCost"]) == (hours * Decimal("42.674")).quantize(Decimal("0.01"))
    assert Decimal(h100["ListCost"]) > Decimal(h100["BilledCost"])


def test_it_lists_each_lines_classes_in_the_team_csv(classes_close):  # noqa: F811
    (nlp,) = [s for s in team_statements(classes_close) if s.team.name == "nlp"]
    rows = read_csv(csv_bytes(TEAM_CSV_HEADER, team_csv_rows(nlp)))

    standard = [row for row in rows if row["record"] == "class" and row["line_kind"] == "standard"]
    assert [(row["gpu_class"], row["gpu_hours"]) for row in standard] == [
        ("H100", "8.43"),
        ("L40S", "3.42"),
        ("default", "3.74"),
    ]
    assert all(row["amount"] == "" for row in standard)  # a line rounds once, not its classes
    (line,) = [row for row in rows if row["record"] == "line" and row["line_kind"] == "standard"]
    assert sum(Decimal(row["amount_unrounded"]) for row in standard).quantize(
        Decimal("0.01")
    ) == Decimal(line["amount"])
    (total,) = [row for row in rows if row["record"] == "total"]
    assert total["amount"] == "1102.64"


def test_it_keeps_todays_files_for_a_month_without_classes(client, worked_example):  # noqa: F811
    close = period_close(period="2026-10").period_close
    rows = [row for s in team_statements(close) for row in team_csv_rows(s)]

    assert not [row for row in rows if row[2] == "class"]
    focus = read_csv(focus_csv(close))
    assert {row["SkuId"] for row in focus if row["x_LineKind"] == "standard"} == {"default"}
    assert {row["SkuId"] for row in focus if row["x_LineKind"] == "sla_penalty"} == {""}
    line = StatementLine.objects.get(
        statement__period_close=close, statement__team__name="nlp", kind="standard"
    )
    client.force_login(make_user("fiona", "finance"))
    data = client.get(reverse("reports:explain", args=[line.pk]), {"format": "json"}).json()
    assert data["classes"] == []


def test_it_explains_a_lines_classes(client, classes_close):  # noqa: F811
    line = StatementLine.objects.get(
        statement__period_close=classes_close, statement__team__name="nlp", kind="standard"
    )
    client.force_login(make_user("fiona", "finance"))

    data = client.get(reverse("reports:explain", args=[line.pk]), {"format": "json"}).json()
    html = client.get(reverse("reports:explain", args=[line.pk])).content.decode()

    assert [(c["gpu_class"], c["quantity_gpu_hours"]) for c in data["classes"]] == [
        ("H100", "8.43"),
        ("L40S", "3.42"),
        ("default", "3.74"),
    ]
    assert Decimal(data["classes"][0]["rate_per_gpu_hour"]) == Decimal("42.674")
    assert 'aria-label="GPU classes"' in html
    assert '<tr data-class="L40S">' in html


@pytest.mark.slow
def test_it_lists_the_classes_on_the_report_page_and_in_its_pdf(
    client,
    classes_close,  # noqa: F811
    tmp_path,
):
    client.force_login(make_user("fiona", "finance"))

    html = client.get(reverse("reports:page", args=["2026-10"])).content.decode()
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(report_pdf("2026-10"))
    text = pdf_text(pdf)

    assert 'aria-label="GPU classes"' in html
    parts = StatementLineClass.objects.filter(line__statement__period_close=classes_close)
    assert html.count('<tr data-class="') == parts.count() == 22
    assert "GPU CLASSES" in text.upper()  # section headings print in upper case
    for figure in ("L40S", "42.6740", "11.4370", "8.43", "3.42"):
        assert figure in text, figure
