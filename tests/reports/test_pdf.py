"""The management PDF, printed by Chromium from the report page: numbers, totals, charts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from django.core import mail

from reports import rows, services
from reports.formatting import money
from reports.models import ReportFile, ReportRun
from tests.pools import reports as pools

# Every test here starts Prometheus, a Celery worker or Chromium (tests/slow.py).
pytestmark = pytest.mark.slow

COLOURED = 80  # max(r,g,b) - min(r,g,b) above this is a chart colour, not grey text


def pdf_text(path: Path) -> str:
    """The PDF's text in reading order, every run of blanks and line breaks made one space."""
    text = subprocess.run(
        ["pdftotext", str(path), "-"], check=True, capture_output=True, text=True
    ).stdout
    return " ".join(text.split())


def word_boxes(path: Path, word: str) -> list[tuple[int, float, float]]:
    """(page, x, y) in points of every occurrence of `word`, from pdftotext -bbox."""
    html = subprocess.run(
        ["pdftotext", "-bbox", str(path), "-"], check=True, capture_output=True, text=True
    ).stdout
    boxes, page = [], 0
    for line in html.splitlines():
        if "<page " in line:
            page += 1
        match = re.search(r'xMin="([\d.]+)" yMin="([\d.]+)".*>(.*)</word>', line)
        if match and match.group(3) == word:
            boxes.append((page, float(match.group(1)), float(match.group(2))))
    return boxes


def coloured_pixels(path: Path, page: int, top_pt: float, height_pt: float, tmp: Path) -> int:
    """Strongly coloured pixels in a band of the page rendered by pdftoppm (PPM, 72 dpi)."""
    subprocess.run(
        ["pdftoppm", "-r", "72", "-f", str(page), "-l", str(page), str(path), str(tmp / "page")],
        check=True,
    )
    (image,) = tmp.glob("page*.ppm")
    data = image.read_bytes()
    magic, width, height, maximum, pixels = data.split(maxsplit=4)
    assert magic == b"P6" and maximum == b"255"
    width, height = int(width), int(height)
    first, last = int(top_pt), min(height, int(top_pt + height_pt))
    count = 0
    for y in range(first, last):
        row = pixels[y * width * 3 : (y + 1) * width * 3]
        for x in range(0, len(row), 3):
            r, g, b = row[x], row[x + 1], row[x + 2]
            if max(r, g, b) - min(r, g, b) > COLOURED:
                count += 1
    return count


def test_it_prints_the_numbers_the_totals_and_the_charts(report_pool, settings, tmp_path) -> None:
    settings.TANDEM_REPORT_EMAILS = ["cfo@example.com", "ops@example.com"]
    run = services.report_run_create(period=pools.PERIOD, kind="monthly", enqueue=False)
    run = services.report_run_execute(run_id=run.pk)

    assert run.status == ReportRun.Status.DONE
    pdf = run.files.get(kind=ReportFile.Kind.PDF)
    assert pdf.path.read_bytes().startswith(b"%PDF-")
    text = pdf_text(pdf.path)
    page = rows.report_page(pools.PERIOD)
    # The three health numbers with their trend, and the verdict.
    for card in page.cards:
        assert card.title.upper() in text.upper()  # headings are upper case on the page
        assert card.shown in text
        assert card.shown_previous in text
    assert page.verdict.text in text
    # Cost per team, and the reconciliation adding up.
    for team in page.teams:
        assert money(team.total) in text
    assert "adds up to the cent" in text
    assert money(page.close.pool_cost) in text
    assert "vit-pretrain" in text  # top preempted tasks
    # The charts: their titles and axis titles are text in the PDF ...
    assert "Pool reconciliation: teams plus platform equal pool cost" in text
    assert "Hour of day (Asia/Shanghai)" in text
    assert "Wait (minutes)" in text
    # ... and the reconciliation chart's bars are drawn below its title.
    (where,) = [box for box in word_boxes(pdf.path, "reconciliation:")]
    page_number, _, top = where
    assert coloured_pixels(pdf.path, page_number, top, 240, tmp_path) > 2000

    # The monthly PDF went to the configured list, once.
    (message,) = mail.outbox
    assert message.to == ["cfo@example.com", "ops@example.com"]
    assert message.attachments[0][0] == pdf.name
    assert message.attachments[0][1] == pdf.path.read_bytes()
    services.report_run_execute(run_id=run.pk)
    assert len(mail.outbox) == 1
