"""One GPU model written two ways by dcgm-exporter (docs/pricing.md "GPU classes"): NVML's
device name, and with it `modelName`, differs across driver versions and platforms ("NVIDIA
H100 80GB HBM3" and "H100 80GB HBM3", case, spaces), and a node upgraded mid-month writes
the new spelling from then on. A book's classes take a model by its name with the "NVIDIA "
prefix, spaces and case set aside, at the close, in the month-to-date draft and in the quota
export's estimate; a book refuses two spellings of one model in two classes; a month closed
before keeps pricing as it priced; and GPU-seconds of models that no class lists, in a book
with classes, are said at the close (audit, log, statement pages, report).

The pool (2026-10-31 local, 00:00 to 12:00; peak hours from 09:00): four H100 and a book of
two classes, H100 (its list: "NVIDIA H100 80GB HBM3") and L40S. gpu-node-01's two GPUs write
"H100 80GB HBM3" throughout, held by `trainer` (vision); gpu-node-02's two write it until
06:00 and "NVIDIA H100 80GB HBM3" from its driver upgrade on, held by `mixed` (nlp). Both
tasks are training (batch): off-peak until 09:00, standard after.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from audit.models import AuditEntry
from billing import services
from billing.models import PeriodClose, PriceBook, StatementLine
from billing.scenarios import ModelClasses
from billing.selectors import period_verification, quota_statuses
from billing.services import PriceBookInvalid, period_close
from metering.models import CapacityInterval, Task, Team, UsageInterval
from tests.dashboards.conftest import make_user
from tests.factories import SourceFactory, TaskFactory, TeamFactory, windows_complete
from tests.helpers import interval_starts, run_sql

pytestmark = pytest.mark.django_db
OCTOBER = "2026-10"
LISTED, BARE = "NVIDIA H100 80GB HBM3", "H100 80GB HBM3"
CLASSES = [
    {"name": "H100", "models": [LISTED], "depreciation_per_gpu_hour": "38.00",
     "facility_per_gpu_hour": "4.10", "gpu_average_power_kw": "0.70"},
    {"name": "L40S", "models": ["NVIDIA L40S"], "depreciation_per_gpu_hour": "9.25",
     "facility_per_gpu_hour": "1.90", "gpu_average_power_kw": "0.35"},
]  # fmt: skip
STEP = dt.timedelta(seconds=300)
METERED_FROM = dt.datetime(2026, 10, 30, 16, tzinfo=dt.UTC)  # 31 October 00:00 local
UPGRADED = dt.datetime(2026, 10, 30, 22, tzinfo=dt.UTC)  # 31 October 06:00 local
METERED_TO = dt.datetime(2026, 10, 31, 4, tzinfo=dt.UTC)  # 31 October 12:00 local
AFTER = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
# Rates per GPU-hour, R = D + F + E x W and R_off = D + E x W (E = 0.82): H100's class, and
# the book's own figures (`default`: 11.50, 2.30, 0.70 kW).
H100_STANDARD, H100_OFFPEAK = Decimal("42.674"), Decimal("38.574")
DEFAULT_STANDARD, DEFAULT_OFFPEAK = Decimal("14.374"), Decimal("12.074")


def meter(source, task: Task, node: str, spelling_at) -> None:
    """Two GPUs of `node`, held by `task` from METERED_FROM to METERED_TO, each interval
    written under the model `spelling_at(interval start)` gives."""
    starts = interval_starts(METERED_FROM, METERED_TO, STEP)
    CapacityInterval.objects.bulk_create(
        CapacityInterval(
            source=source,
            fault_domain=node,
            interval_start=start,
            gpu_model=spelling_at(start),
            gpus_present=2,
            capacity_gpu_seconds=Decimal(600),
        )
        for start in starts
    )
    UsageInterval.objects.bulk_create(
        UsageInterval(
            task=task,
            interval_start=start,
            gpu_model=spelling_at(start),
            alloc_gpu_seconds=Decimal(600),
        )
        for start in starts
    )


@pytest.fixture
def spelled_pool(default_book) -> PriceBook:
    book = services.price_book_create_draft(
        effective_from=dt.date(2026, 10, 1), gpu_classes=CLASSES
    )
    services.price_book_publish(price_book_id=book.pk)
    source = SourceFactory(name="default")
    trainer = TaskFactory(
        source=source, external_id="trainer", team=TeamFactory(name="vision"), kind="training_batch"
    )
    mixed = TaskFactory(
        source=source, external_id="mixed", team=TeamFactory(name="nlp"), kind="training_batch"
    )
    meter(source, trainer, "gpu-node-01", lambda start: BARE)
    meter(source, mixed, "gpu-node-02", lambda start: BARE if start < UPGRADED else LISTED)
    windows_complete(periods=[OCTOBER])
    return book


def amounts(close: PeriodClose) -> dict[tuple[str, str], Decimal]:
    lines = StatementLine.objects.filter(statement__period_close=close)
    return {(line.statement.team.name, line.kind): line.amount for line in lines}


def test_it_prices_a_model_written_without_nvidia_at_its_class_rates(spelled_pool):
    close = period_close(period=OCTOBER, now=AFTER).period_close

    # vision's two GPUs, 9 hours off-peak and 3 at peak, all H100: 2 x 9 x 38.574 = 694.332
    # and 2 x 3 x 42.674 = 256.044. Before, "H100 80GB HBM3" was no class's and went to
    # `default`: 217.33 (2 x 9 x 12.074) and 86.24 (2 x 3 x 14.374), silently.
    assert amounts(close) == {
        ("vision", "offpeak"): Decimal("694.33"),
        ("vision", "standard"): Decimal("256.04"),
        # nlp's node upgraded at 06:00: its six hours before were `default`'s too (376.33 =
        # 2 x 6 x 12.074 + 2 x 3 x 38.574); now all nine at H100's off-peak rate.
        ("nlp", "offpeak"): Decimal("694.33"),
        ("nlp", "standard"): Decimal("256.04"),
    }
    # The pool: 4 GPUs x 12 hours x 42.674 = 2,048.352 (before, 1,029.55: 36 GPU-hours at
    # 14.374 and 12 at 42.674).
    assert close.pool_cost == Decimal("2048.35")
    assert close.capacity_gpu_seconds_by_class == {"H100": "172800", "L40S": "0", "default": "0"}
    assert close.unclassed_gpu_seconds == 0
    assert period_verification(OCTOBER).differences == []


def test_it_estimates_the_quota_list_price_of_both_spellings_at_the_class_rates(spelled_pool):
    at = METERED_TO + dt.timedelta(hours=1)

    found = {
        status.team: status.list_price_estimate
        for status in quota_statuses(at=at, teams=list(Team.objects.all()))
    }

    # 694.332 + 256.044 = 950.376 for each team; before, vision's 303.58 (all `default`) and
    # nlp's 632.38 (its first six hours `default`).
    assert found == {"vision": Decimal("950.38"), "nlp": Decimal("950.38")}


def test_it_keeps_pricing_a_month_closed_before_as_it_priced(spelled_pool, monkeypatch):
    # Builder 4 matched models by their exact name: a month it closed is rebuilt so, and
    # neither verification nor a later close re-prices it.
    monkeypatch.setattr(services.close, "SCENARIO_BUILDER_VERSION", 4)
    close = period_close(period=OCTOBER, now=AFTER).period_close
    monkeypatch.undo()

    assert close.scenario_builder_version == 4
    assert close.pool_cost == Decimal("1029.55")
    assert amounts(close)[("vision", "offpeak")] == Decimal("217.33")
    assert period_verification(OCTOBER).differences == []
    assert period_close(period=OCTOBER, now=AFTER).data_changed is False
    # November's close re-checks October, re-built by builder 4: nothing to correct.
    november_1 = dt.datetime(2026, 10, 31, 16, tzinfo=dt.UTC)
    meter_november = CapacityInterval.objects.create(
        source=Task.objects.get(external_id="trainer").source,
        interval_start=november_1,
        gpu_model=BARE,
        gpus_present=2,
        capacity_gpu_seconds=Decimal(600),
    )
    windows_complete(periods=["2026-11"])
    november = period_close(
        period="2026-11", now=dt.datetime(2026, 12, 2, tzinfo=dt.UTC), recheck=[OCTOBER]
    )
    assert november.corrected_periods == ()
    by_class = november.period_close.capacity_gpu_seconds_by_class
    assert by_class["H100"] == str(meter_november.capacity_gpu_seconds)


@pytest.mark.parametrize("spelling", ["H100 80GB HBM3", " nvidia  h100 80gb hbm3 "])
def test_it_refuses_two_spellings_of_one_model_in_two_classes(default_book, spelling):
    other = CLASSES[1] | {"name": "H100-old-driver", "models": [spelling]}

    with pytest.raises(PriceBookInvalid) as refused:
        services.price_book_create_draft(
            effective_from=dt.date(2026, 10, 1), gpu_classes=[CLASSES[0], other]
        )

    assert (
        f"gpu_classes[1]: model {spelling!r} of class 'H100-old-driver' is already in class "
        f"'H100' (as {LISTED!r}); a model belongs to one class"
    ) in str(refused.value)


def test_it_refuses_two_spellings_of_one_model_in_two_classes_in_the_database(default_book):
    book = services.price_book_create_draft(
        effective_from=dt.date(2026, 10, 1), gpu_classes=CLASSES[:1]
    )

    twice = "in two classes of one price book: H100 and H100-old-driver"
    with pytest.raises(IntegrityError, match=twice):
        with transaction.atomic():
            run_sql(
                "INSERT INTO billing_pricebookgpuclass (price_book_id, name, models,"
                " depreciation_per_gpu_hour, facility_per_gpu_hour, gpu_average_power_kw)"
                " VALUES (%s, 'H100-old-driver', '[\"h100  80GB HBM3\"]', 40, 4, 0.7)",
                [book.pk],
            )
            run_sql("SET CONSTRAINTS ALL IMMEDIATE")  # checked at commit: check now

    # Two spellings in one class are one model listed as metered: taken.
    services.price_book_set_gpu_classes(
        price_book_id=book.pk, gpu_classes=[CLASSES[0] | {"models": [LISTED, BARE]}]
    )


def test_it_says_at_the_close_which_models_no_class_lists(spelled_pool, client):
    source = SourceFactory(name="other")
    chat = TaskFactory(
        source=source, external_id="chat", team=TeamFactory(name="chat"), kind="inference"
    )
    meter(source, chat, "gpu-node-03", lambda start: "NVIDIA A100-SXM4-80GB")
    windows_complete(periods=[OCTOBER], sources=[source])

    close = period_close(period=OCTOBER, now=AFTER).period_close

    # Two A100 for 12 hours, which no class lists: priced at `default`'s rates, as the book
    # says, and said (86,400 GPU-seconds), not refused: a book may leave a model to `default`.
    assert close.unclassed_gpu_seconds == Decimal(86400)
    assert close.unclassed_gpu_models == ["NVIDIA A100-SXM4-80GB"]
    assert close.capacity_gpu_seconds_by_class == {
        "H100": "172800",
        "L40S": "0",
        "default": "86400",
    }
    entry = AuditEntry.objects.get(object_type="billing.periodclose", action="close")
    assert Decimal(entry.changes["unclassed_gpu_seconds"]) == 86400
    assert entry.changes["unclassed_gpu_models"] == ["NVIDIA A100-SXM4-80GB"]
    client.force_login(make_user("fiona", "finance"))
    pages = [
        reverse("dashboards:statement_period", args=[OCTOBER]),
        reverse("reports:page", args=[OCTOBER]),
    ]
    for url in pages:
        html = client.get(url).content.decode()
        start = html.index('data-flag="unclassed-models"')
        shown = html[start : html.index("</li>", start)]
        said = "86400.000000 GPU-seconds of capacity of GPU models no class of price book v2"
        assert said in shown, url
        assert "NVIDIA A100-SXM4-80GB" in shown, url


def test_it_keeps_exact_names_for_a_book_that_prices_two_spellings_apart() -> None:
    # Published before books were refused it: the older driver's spelling in a class of its
    # own. By key, one class would take both spellings' GPUs (whichever was listed last).
    apart = ModelClasses({LISTED: "H100", BARE: "H100-legacy"})
    assert (apart.of(LISTED), apart.of(BARE), apart.of("nvidia h100 80gb hbm3")) == (
        "H100",
        "H100-legacy",
        "default",
    )
    together = ModelClasses({LISTED: "H100", "NVIDIA L40S": "L40S"})
    assert (together.of(BARE), together.of("l40s")) == ("H100", "L40S")
