"""Rows every benchmark reports, and the one table `make bench` prints.

The machines are shared and noisy, so a figure is judged by its ratio to a reference measured
in the same run (COPY, Prometheus's own evaluation, bare DRF, writing the same bytes), never
by a bare timing. A row without a reference (a memory peak, an extrapolation) carries its goal
in `limit` and is judged on `value` instead.

A benchmark script calls `report(rows)` at the end: it prints the rows and, when the runner
set `BENCH_ROWS_JSON`, writes them there so `benchmarks/run.py` can gather one table.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

ROWS_ENV = "BENCH_ROWS_JSON"


@dataclass(frozen=True)
class Row:
    figure: str
    value: str  # the measured figure, formatted with its unit
    reference: str  # what it is compared against in the same run, formatted ("" if none)
    ratio: float | None  # value / reference, or None when there is no reference
    goal: str  # e.g. "ratio <= 2", "<= 1024 MB"
    # True/False when the goal was met/missed; None for figures that are only reported.
    ok: bool | None = None
    note: str = ""

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "MISSED", None: "-"}[self.ok]


def within(value: float, *, at_most: float | None = None, at_least: float | None = None) -> bool:
    if at_most is not None and value > at_most:
        return False
    return not (at_least is not None and value < at_least)


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def format_table(rows: list[Row]) -> str:
    """A Markdown table: readable in a terminal and pasteable into RESULTS.md as it is."""
    header = ("figure", "value", "reference (same run)", "ratio", "goal", "verdict")
    body = [
        (
            row.figure + (f" ({row.note})" if row.note else ""),
            row.value,
            row.reference or "-",
            format_ratio(row.ratio),
            row.goal,
            row.verdict,
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(cells) for cells in body)])


def report(rows: list[Row]) -> None:
    print()
    print(format_table(rows), flush=True)
    target = os.environ.get(ROWS_ENV)
    if target:
        Path(target).write_text(json.dumps([asdict(row) for row in rows], indent=1))


def read_rows(path: Path) -> list[Row]:
    return [Row(**fields) for fields in json.loads(path.read_text())]
