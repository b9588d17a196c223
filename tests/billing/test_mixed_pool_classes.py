"""A mixed pool metered with its GPU models and closed with a book of GPU classes
(docs/pricing.md "GPU classes"): each task's contribution is stored per class, so FOCUS names
the task on every class row; platform lines keep their per-class parts; a preemption records
the GPU model it held and is compensated at that class's rate (rule 5).

The pool (2026-10-31 local, 00:00 to 12:00): 4 H100 and 4 L40S GPUs. `trainer` (vision)
holds 2 H100 throughout and is evicted four times at peak; `mixed` (nlp) holds 1 H100 and
1 L40S, `notebook` (nlp) 1 L40S; `chat-api` (chat, inference) 1 L40S.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal, localcontext
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from billing import services
from billing.models import (
    ImmutableRecordError,
    PeriodClose,
    PlatformLine,
    PlatformLineClass,
    PriceBook,
    Statement,
    StatementLine,
    StatementLineTaskClass,
)
from billing.pricing import canonical_json
from billing.pricing.money import round_money
from billing.scenarios import SCENARIO_BUILDER_VERSION, scenario_build
from billing.selectors import (
    period_bounds,
    period_scenario_text,
    period_verification,
    quota_statuses,
    rates_per_gpu_class,
)
from billing.services import period_close
from metering.models import CapacityInterval, Preemption, Task, Team, UsageInterval
from reports.render_focus import focus_csv
from reports.rows import apportion
from tests.dashboards.conftest import make_user
from tests.factories import SourceFactory, TaskFactory, TeamFactory, windows_complete
from tests.helpers import interval_starts, run_sql

pytestmark = pytest.mark.django_db
OCTOBER = "2026-10"
OCTOBER_1 = dt.date(2026, 10, 1)
H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
CLASSES = [
    {"name": "H100", "models": [H100], "depreciation_per_gpu_hour": "38.00",
     "facility_per_gpu_hour": "4.10", "gpu_average_power_kw": "0.70"},
    {"name": "L40S", "models": [L40S], "depreciation_per_gpu_hour": "9.25",
     "facility_per_gpu_hour": "1.90", "gpu_average_power_kw": "0.35"},
]  # fmt: skip
STEP = dt.timedelta(seconds=300)
METERED_FROM = dt.datetime(2026, 10, 30, 16, tzinfo=dt.UTC)  # 31 October 00:00 local
METERED_TO = dt.datetime(2026, 10, 31, 4, tzinfo=dt.UTC)  # 31 October 12:00 local
# Local 09:02, 09:32, 10:02 and 11:02 on 31 October: all in peak hours [9, 22).
EVICTIONS = [
    dt.datetime(2026, 10, 31, 1, 2, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 1, 32, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 2, 2, tzinfo=dt.UTC),
    dt.datetime(2026, 10, 31, 3, 2, tzinfo=dt.UTC),
]
AFTER = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
# (task, team, kind, {model: GPUs held})
TASKS = [
    ("trainer", "vision", "training_batch", {H100: 2}),
    ("mixed", "nlp", "training_batch", {H100: 1, L40S: 1}),
    ("notebook", "nlp", "training_interactive", {L40S: 1}),
    ("chat-api", "chat", "inference", {L40S: 1}),
]


@pytest.fixture
def mixed_pool(default_book) -> dict[str, Task]:
    book = services.price_book_create_draft(
        effective_from=dt.date(2026, 10, 1), gpu_classes=CLASSES
    )
    services.price_book_publish(price_book_id=book.pk)
    source = SourceFactory(name="default")
    teams = {name: TeamFactory(name=name) for name in {team for _, team, _, _ in TASKS}}
    tasks = {
        name: TaskFactory(source=source, external_id=name, team=teams[team], kind=kind)
        for name, team, kind, _ in TASKS
    }
    starts = interval_starts(METERED_FROM, METERED_TO, STEP)
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source,
            interval_start=start,
            gpu_model=model,
            gpus_present=4,
            capacity_gpu_seconds=Decimal(4 * 300),
        )
        for start in starts
        for model in (H100, L40S)
    )
    UsageInterval.objects.bulk_create(
        UsageInterval(
            task=tasks[name],
            interval_start=start,
            gpu_model=model,
            alloc_gpu_seconds=Decimal(gpus * 300),
        )
        for start in starts
        for name, _, _, held in TASKS
        for model, gpus in held.items()
    )
    Preemption.objects.bulk_create(
        Preemption(
            task=tasks["trainer"],
            pod=f"trainer-{n}",
            at=at,
            gpus=Decimal(2),
            seconds_since_start=3600,
            gpu_model=H100,
        )
        for n, at in enumerate(EVICTIONS)
    )
    windows_complete(periods=[OCTOBER])
    return tasks


def read_csv(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def test_it_compensates_a_preemption_on_h100_at_the_h100_rate(mixed_pool) -> None:
    close = period_close(period=OCTOBER, now=AFTER).period_close

    # Independently: the fourth eviction (N = 3) at peak, lost = min(1800 s cap, 3600 s run)
    # x 2 GPUs, at H100's R = D + F + E x W = 38.00 + 4.10 + 0.82 x 0.70 = 42.674 per GPU-hour.
    h100_rate = Decimal("38.00") + Decimal("4.10") + Decimal("0.82") * Decimal("0.70")
    expected = (Decimal(1800) * 2 * h100_rate / 3600).quantize(Decimal("0.01"))
    assert expected == Decimal("42.67")
    default_rate = Decimal("11.50") + Decimal("2.30") + Decimal("0.82") * Decimal("0.70")
    assert (Decimal(1800) * 2 * default_rate / 3600).quantize(Decimal("0.01")) != expected
    (line,) = StatementLine.objects.filter(statement__period_close=close, kind="compensation")
    assert line.amount == -expected
    assert [(part.gpu_class, part.amount_unrounded) for part in line.classes.all()] == [
        ("H100", -Decimal(1800) * 2 * h100_rate / 3600)
    ]
    scenario = json.loads(period_scenario_text(OCTOBER, 0))
    assert {row.get("gpu_class") for row in scenario["preemptions"]} == {"H100"}
    assert close.scenario_builder_version == SCENARIO_BUILDER_VERSION
    assert period_verification(OCTOBER).differences == []


def test_it_verifies_a_month_closed_before_preemptions_carried_a_class(
    mixed_pool, monkeypatch
) -> None:
    # Builder 2 wrote every preemption in `default`: the month is re-built as it was.
    monkeypatch.setattr(services.close, "SCENARIO_BUILDER_VERSION", 2)
    close = period_close(period=OCTOBER, now=AFTER).period_close
    monkeypatch.undo()

    assert close.scenario_builder_version == 2
    scenario = json.loads(period_scenario_text(OCTOBER, 0))
    assert all("gpu_class" not in row for row in scenario["preemptions"])
    (line,) = StatementLine.objects.filter(statement__period_close=close, kind="compensation")
    assert [part.gpu_class for part in line.classes.all()] == ["default"]
    assert period_verification(OCTOBER).differences == []
    assert period_close(period=OCTOBER, now=AFTER).data_changed is False


def test_it_stores_each_contribution_per_class_summing_to_it_and_to_the_line(mixed_pool):
    close = period_close(period=OCTOBER, now=AFTER).period_close
    lines = StatementLine.objects.filter(
        statement__period_close=close, kind__in=["baseline", "standard", "offpeak", "compensation"]
    )

    (standard,) = lines.filter(statement__team__name="nlp", kind="standard")
    parts = {
        (contribution.task.external_id, part.gpu_class)
        for contribution in standard.tasks.all()
        for part in contribution.classes.all()
    }
    assert parts == {("mixed", "H100"), ("mixed", "L40S"), ("notebook", "L40S")}
    with localcontext(prec=80):  # 30-place figures: sums are exact
        for line in lines:
            per_class: dict[str, Decimal] = {}
            for contribution in line.tasks.all():
                own = list(contribution.classes.all())
                assert own, (line, contribution)
                assert sum(p.amount_unrounded for p in own) == contribution.amount_unrounded
                assert sum(p.gpu_seconds for p in own) == contribution.gpu_seconds
                for part in own:
                    per_class[part.gpu_class] = (
                        per_class.get(part.gpu_class, Decimal(0)) + part.amount_unrounded
                    )
            assert per_class == {p.gpu_class: p.amount_unrounded for p in line.classes.all()}
    # Latency lines and corrections have none.
    assert not StatementLineTaskClass.objects.exclude(contribution__line__in=lines)


def test_it_writes_a_focus_row_per_line_task_and_class_naming_the_task(mixed_pool):
    close = period_close(period=OCTOBER, now=AFTER).period_close
    rows = read_csv(focus_csv(close))

    standard = [
        (row["ResourceId"], row["SkuId"], row["ResourceType"])
        for row in rows
        if row["SubAccountId"] == "nlp" and row["x_LineKind"] == "standard"
    ]
    # By class, then task.
    assert [(task, sku) for task, sku, _ in standard] == [
        ("mixed", "H100"),
        ("mixed", "L40S"),
        ("notebook", "L40S"),
    ]
    assert all(kind for _, _, kind in standard)
    assert all(row["ResourceId"] for row in rows if row["SkuId"] not in ("", "default"))
    for line in StatementLine.objects.filter(statement__period_close=close):
        charged = [row for row in rows if row["x_StatementLineId"] == str(line.pk)]
        assert sum(Decimal(row["BilledCost"]) for row in charged) == line.amount, line
    totals = Statement.objects.filter(period_close=close).values_list("total", flat=True)
    assert sum(Decimal(row["BilledCost"]) for row in rows) == sum(totals)


def test_it_bills_each_class_in_focus_what_the_class_alone_was_billed(mixed_pool):
    """The task rows of a class share that class's cents, not the whole line's: a reader who
    sums BilledCost by SkuId gets each class's share of the line, however many tasks."""
    close = period_close(period=OCTOBER, now=AFTER).period_close
    rows = read_csv(focus_csv(close))
    for line in StatementLine.objects.filter(statement__period_close=close, amount__gt=0):
        parts = list(line.classes.all())
        if len(parts) < 2:
            continue
        expected = dict(
            zip(
                (part.gpu_class for part in parts),
                apportion(line.amount, [part.amount_unrounded for part in parts]),
                strict=True,
            )
        )
        billed: dict[str, Decimal] = {}
        for row in rows:
            if row["x_StatementLineId"] == str(line.pk):
                billed[row["SkuId"]] = billed.get(row["SkuId"], Decimal(0)) + Decimal(
                    row["BilledCost"]
                )
        assert billed == expected, line


def test_it_stores_the_platform_lines_parts_per_class_and_shows_them(mixed_pool, client):
    outcome = period_close(period=OCTOBER, now=AFTER)
    close = outcome.period_close
    result = services.close._price_metering(
        period_bounds(OCTOBER), close.price_book
    ).result  # the same metering, priced again: the engine's own parts

    expected = {
        (line.kind, part.gpu_class): part.amount
        for line in result.platform.lines
        for part in line.by_class
    }
    stored = {
        (part.line.name, part.gpu_class): part.amount_unrounded
        for part in PlatformLineClass.objects.filter(line__period_close=close).select_related(
            "line"
        )
    }
    assert stored == expected
    assert {gpu_class for _, gpu_class in stored} >= {"H100", "L40S"}
    with localcontext(prec=80):
        for line in PlatformLine.objects.filter(period_close=close):
            parts = list(line.classes.all())
            if parts:
                assert sum(p.amount_unrounded for p in parts) == line.amount_unrounded, line
                assert round_money(line.amount_unrounded, "CNY") == line.amount
    shown = {
        part.gpu_class
        for line in PlatformLine.objects.filter(period_close=close)
        for part in line.class_parts
    }
    assert shown == {"H100", "L40S"}

    client.force_login(make_user("fiona", "finance"))
    page = client.get(reverse("dashboards:statement_period", args=[OCTOBER])).content.decode()
    assert 'data-platform-class="H100"' in page
    assert 'data-platform-class="L40S"' in page


def test_it_never_changes_a_contribution_or_platform_class_part(mixed_pool):
    period_close(period=OCTOBER, now=AFTER)
    contribution_part = StatementLineTaskClass.objects.first()
    platform_part = PlatformLineClass.objects.first()

    for part in (contribution_part, platform_part):
        part.amount_unrounded += 1
        with pytest.raises(ImmutableRecordError):
            part.save()
        with pytest.raises(ImmutableRecordError):
            type(part).objects.filter(pk=part.pk).delete()
    for table in ("billing_statementlinetaskclass", "billing_platformlineclass"):
        with pytest.raises(IntegrityError, match=f"{table} rows belong"):
            with transaction.atomic():
                run_sql(f"UPDATE {table} SET amount_unrounded = 0")
    assert PeriodClose.objects.count() == 1


def test_it_sums_a_tasks_models_of_one_class_in_an_interval(default_book):
    # The default book lists no class: A100 and L40S are both `default`, and a task that
    # held one of each in an interval has one usage row there, its allocations summed.
    source = SourceFactory(name="default")
    task = TaskFactory(source=source, external_id="both", team=TeamFactory(name="nlp"))
    other = TaskFactory(source=source, external_id="one", team=task.team)
    for model in ("NVIDIA A100-SXM4-80GB", L40S):
        CapacityInterval.objects.create(
            source=source,
            interval_start=METERED_FROM,
            gpu_model=model,
            gpus_present=2,
            capacity_gpu_seconds=Decimal(600),
        )
    UsageInterval.objects.bulk_create(
        [
            UsageInterval(
                task=task, interval_start=METERED_FROM, gpu_model=L40S,
                alloc_gpu_seconds=Decimal("150.5"),
            ),
            UsageInterval(
                task=task, interval_start=METERED_FROM, gpu_model="NVIDIA A100-SXM4-80GB",
                alloc_gpu_seconds=Decimal("149.5"),
            ),
            UsageInterval(
                task=other, interval_start=METERED_FROM, gpu_model=L40S,
                alloc_gpu_seconds=Decimal("300.250000"),
            ),
        ]
    )  # fmt: skip

    built = scenario_build(start=METERED_FROM, end=METERED_FROM + STEP, price_book=default_book)
    text = canonical_json(built.scenario)
    assert '{"alloc_gpu_seconds":"300","interval":"2026-10-30T16:00:00Z","task":"both"}' in text
    assert '{"alloc_gpu_seconds":"300.25","interval":"2026-10-30T16:00:00Z","task":"one"}' in text
    assert len(built.scenario.usage) == 2


def test_it_prices_the_quota_list_estimate_at_each_gpu_classes_rates(mixed_pool) -> None:
    """The quota export's `list_price_estimate` (the money a scheduler enforces against until
    the month-to-date draft is priced) at each model's class rates: before, every GPU-hour
    went at the `default` class's, and vision's H100 hours at about a third of their price."""
    book = PriceBook.objects.get(status=PriceBook.Status.PUBLISHED, effective_from=OCTOBER_1)
    rates = rates_per_gpu_class(book)
    classes = {H100: "H100", L40S: "L40S"}
    at = METERED_TO + dt.timedelta(hours=1)

    found = {
        status.team: status for status in quota_statuses(at=at, teams=list(Team.objects.all()))
    }

    for team in ("vision", "nlp", "chat"):
        money = Decimal(0)
        moment = METERED_FROM
        while moment < METERED_TO:
            peak = 9 <= moment.astimezone(ZoneInfo(book.timezone)).hour < 22
            for _, owner, kind, held in TASKS:
                for model, gpus in held.items() if owner == team else ():
                    standard, offpeak = rates[classes[model]]
                    training = kind != "inference"
                    money += gpus * 300 * (standard if peak or not training else offpeak)
            moment += STEP
        with localcontext(prec=50):
            wanted = round_money(money / 3600, book.currency)
        assert found[team].list_price_estimate == wanted, team
    default_only = rates["default"][0] * 2 * 3  # 3 peak hours of 2 H100 at the default rate
    assert found["vision"].list_price_estimate > 2 * default_only  # the H100 rate, not default
