"""Writes for billing: period closes (statements, corrections) and the scheduled close.

A period close is one transaction: it builds the month's scenario from the metering tables,
prices it with the book in force, and inserts the close, the compressed scenario, one
statement per team with its lines and their per-task contributions, the platform lines and
the SLA breaches. Those rows are never updated (see models.py); late data for a closed month
becomes correction lines in a later close.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, localcontext

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from audit.services import audit_record
from billing.close_hooks import period_close_hooks
from billing.models import (
    LineKind,
    PeriodClose,
    PeriodScenario,
    PlatformLine,
    PlatformLineClass,
    PlatformLineName,
    PriceBook,
    SlaBreach,
    Statement,
    StatementLine,
    StatementLineClass,
    StatementLineTask,
    StatementLineTaskClass,
)
from billing.pricing import ENGINE_VERSION, Line, ScenarioError
from billing.pricing.money import CONTEXT, hours
from billing.scenarios import (
    SCENARIO_BUILDER_VERSION,
    BuiltScenario,
    PricedScenario,
    billed_kinds,
    judged_slos,
    scenario_build,
    scenario_digest,
    scenario_price,
    scenario_sha256,
    service_slos_of,
    task_kinds_of,
)
from billing.selectors import (
    PeriodBounds,
    PriceBookNotFound,
    WindowProblem,
    closed_period_bounds,
    ingested_until,
    min_completeness,
    period_bounds,
    period_bounds_to_price,
    period_containing,
    period_label,
    period_previous,
    period_window_problems,
    periods_archived,
    price_book_in_force,
)
from billing.services.books import PERIOD_CLOSE_LOCK, BillingError, _lock
from kernel.collector import collector_paused
from metering.models import IngestWindow, Team
from metering.selectors import (
    BlindSpots,
    gpus_metered_twice,
    window_blind_spots,
    windows_off_step,
    windows_unsighted,
)

ZERO = Decimal(0)


class PeriodCloseRefused(BillingError):
    """The month cannot be closed (yet); `reasons` lists every problem found.

    `incomplete` holds the metering ranges among them (missing, not done, short), which
    finance may accept (period_close's `accept_incomplete`) when the data will never come."""

    def __init__(
        self, period: str, reasons: list[str], incomplete: list[WindowProblem] | None = None
    ) -> None:
        self.period = period
        self.reasons = reasons
        self.incomplete = incomplete or []
        super().__init__(f"period {period} cannot be closed: " + "; ".join(reasons))


# --- Period close ---------------------------------------------------------------------


@dataclass(frozen=True)
class PeriodCloseOutcome:
    period_close: PeriodClose
    created: bool
    # Metering no longer matches the stored scenario: a later close will add corrections.
    data_changed: bool = False
    corrected_periods: tuple[str, ...] = ()
    # Closed months whose metering changed but holds windows below TANDEM_MIN_COMPLETENESS:
    # no correction is booked from them until their windows are complete again.
    corrections_withheld: tuple[str, ...] = ()
    # Windows of the month with inference pods that served without the latency histogram (no
    # SLA breach of theirs is in it, pricing rule 4), and with GPU-seconds of pods whose task,
    # team and kind were guessed. Said, audited and logged; never refused (see _blind_spots_say).
    blind_spots: BlindSpots = field(default_factory=BlindSpots)


@collector_paused
def period_close(
    *,
    period: str,
    corrections: bool = True,
    recheck: Iterable[str] = (),
    retake_kinds: Iterable[str] = (),
    now: dt.datetime | None = None,
    accept_incomplete: str = "",
) -> PeriodCloseOutcome:
    """Close `period` ("YYYY-MM" in the pool's time zone): price it and store its statements.

    Refuses (PeriodCloseRefused, listing every reason) while the month is not over, while an
    ingest window of it is pending, running, failed or below TANDEM_MIN_COMPLETENESS, when no
    published price book is in force, when two sources meter one GPU at the same time (its
    capacity and usage would be billed twice) or windows beside another source's were written
    before that could be seen (`period_window_problems`), or when metering holds
    nothing for it. A scenario the
    engine cannot price raises its ScenarioError naming the record. Nothing is stored unless
    everything is.

    `accept_incomplete` is finance's reason to close a month whose metering will never be
    complete (Prometheus lost the data): the missing and short ranges no longer refuse the
    close, and are stored on it with the reason, shown wherever the month is, and audited.
    Every other refusal stands. Beat never passes it.

    Idempotent: an already closed month is returned as it is (never re-priced or edited);
    `data_changed` says whether its metering changed since.

    With `corrections`, earlier closed months whose ingest windows changed after they were
    priced (plus those named in `recheck`) are re-priced with their own book; differences
    become correction lines in this month's statements. A re-priced month keeps the kinds it
    priced its tasks as (`PeriodScenario.task_kinds`), except those named in `retake_kinds`
    (re-checked too), which take each task's kind from its row as it is now: finance's
    explicit call where a closed month's kind was a guess (a priority class the source did
    not map, mapped since and ingested again), audited on the close.
    """
    now = now or timezone.now()
    bounds = period_bounds_to_price(period)
    accepted = _accepted_reason(accept_incomplete)
    existing = PeriodClose.objects.filter(period=period).first()
    if existing is not None:
        return _already_closed(existing)
    with _metering_snapshot():
        book, incomplete = _ready_to_close(bounds, now, accepted)
        priced = _price_metering(bounds, book)
        if not priced.built.has_metering_data:
            reason = f"metering holds no capacity or usage for {period}"
            raise PeriodCloseRefused(period, [reason])
        readings = [(hook, hook.read(bounds, book)) for hook in period_close_hooks()]
        blind = window_blind_spots(
            start=bounds.start, end=bounds.end, min_requests=book.sla_min_requests
        )
        retaken = set(retake_kinds)
        due, withheld = (
            _corrections_due(period, set(recheck) | retaken, retaken) if corrections else ([], [])
        )
    for item in due:
        if item.book.currency != book.currency:
            raise PeriodCloseRefused(
                period,
                [
                    f"late data changed {item.period}, billed in {item.book.currency}; "
                    f"corrections cannot be added to statements in {book.currency}"
                ],
            )
    with transaction.atomic():
        _lock(PERIOD_CLOSE_LOCK)
        existing = PeriodClose.objects.filter(period=period).first()
        if existing is not None:  # closed by a concurrent run while this one priced
            return _already_closed(existing)
        for item in due:
            latest = PeriodScenario.objects.filter(period=item.period).order_by("-revision")
            if latest.values_list("revision", flat=True).first() != item.revision - 1:
                raise PeriodCloseRefused(
                    period, [f"another close corrected {item.period} meanwhile; run it again"]
                )
        close = _store_close(bounds, book, priced, due, now, accepted, incomplete, blind)
        for hook, reading in readings:
            hook.store(close, reading)
        changes: dict[str, object] = {"pool_cost": close.pool_cost}
        if close.is_incomplete:
            changes["incomplete_reason"] = close.incomplete_reason
            changes["incomplete_ranges"] = [item["message"] for item in close.incomplete_ranges]
        changes.update(_blind_spots_audited(blind))
        if close.unclassed_gpu_seconds:
            changes["unclassed_gpu_seconds"] = close.unclassed_gpu_seconds
            changes["unclassed_gpu_models"] = close.unclassed_gpu_models
        if retaken:
            changes["kinds_retaken"] = sorted(retaken)
        audit_record(action="close", obj=close, changes=changes)
    _blind_spots_say(period, blind)
    _unclassed_say(close)
    return PeriodCloseOutcome(
        period_close=close,
        created=True,
        corrected_periods=tuple(item.period for item in due),
        corrections_withheld=tuple(withheld),
        blind_spots=blind,
    )


def _blind_spots_audited(blind: BlindSpots) -> dict[str, object]:
    """The blind spots' figures that are not 0."""
    return {name: value for name, value in blind.closed().items() if value}


def _blind_spots_say(period: str, blind: BlindSpots) -> None:
    """Logged, so beat's close says it too. Not refused: an inference pod meant to serve
    without the histogram, or pods kube-state-metrics never scrapes (a pod living less than
    its scrape interval), or a pool whose preemptions Kueue makes, would hold every close,
    and accepting a month incomplete accepts every problem with them."""
    if blind.latency_unseen_windows:
        logger.warning(
            "%s closed with %d windows whose inference pods served without the latency"
            " histogram: no SLA breach of theirs (pricing rule 4) is in it",
            period,
            blind.latency_unseen_windows,
        )
    if blind.identity_guessed_windows:
        logger.warning(
            "%s closed with %d windows holding %s GPU-seconds of pods kube-state-metrics did"
            " not describe: their task, team and kind are guesses",
            period,
            blind.identity_guessed_windows,
            blind.identity_guessed_gpu_seconds,
        )
    if blind.kueue_preempted_workloads:
        logger.warning(
            "%s closed with %d workloads Kueue preempted in %d windows: no pod shows them"
            " preempted, so rule 5 (starvation credits) counted none of them",
            period,
            blind.kueue_preempted_workloads,
            blind.kueue_preemption_windows,
        )
    if blind.kueue_counts_unplaced:
        logger.warning(
            "%s closed with %d of Kueue's counts whose evictions could not be placed in time",
            period,
            blind.kueue_counts_unplaced,
        )
    if blind.kind_guessed_windows:
        logger.warning(
            "%s closed with %d windows holding %s GPU-seconds under priority classes the source"
            " does not map: counted as training_batch",
            period,
            blind.kind_guessed_windows,
            blind.kind_guessed_gpu_seconds,
        )
    if blind.unheld_busy_windows:
        logger.warning(
            "%s closed with %d windows in which GPUs no pod held were busy %s GPU-seconds:"
            " work outside any pod's GPU request, billed to no task",
            period,
            blind.unheld_busy_windows,
            blind.unheld_busy_gpu_seconds,
        )
    if blind.slo_unstated_services:
        logger.warning(
            "%s closed with %d service(s) whose SLA breaches (rule 4) were judged by the default"
            " SLO, which nobody stated",
            period,
            blind.slo_unstated_services,
        )
    if blind.services_team_moved:
        logger.warning(
            "%s closed with %d service(s) whose namespace's inference pods ran as another team"
            " than the one their SLA credits (rule 4) went to, which nobody stated",
            period,
            blind.services_team_moved,
        )


def _unclassed_say(close: PeriodClose) -> None:
    """Logged, so beat's close says it too. Not refused: `default` is the class of every model
    no class lists, by the book's design (a book may list its H100s alone); but a spelling
    the book did not foresee (a model `gpu_model_key` does not make equal) would price the
    GPUs at `default`'s rates silently."""
    if close.unclassed_gpu_seconds:
        logger.warning(
            "%s closed with %s capacity GPU-seconds of GPU models no class of price book v%d"
            " lists, priced at the default class's rates: %s",
            close.period,
            close.unclassed_gpu_seconds,
            close.price_book_version,
            ", ".join(close.unclassed_gpu_models),
        )


@contextmanager
def _metering_snapshot() -> Iterator[None]:
    """Every read of a close sees one committed state of the metering tables.

    Ingest windows commit while a month is read (several queries, tens of seconds at scale);
    REPEATABLE READ keeps usage, capacity and latency from different moments out of one
    scenario. Inside a caller's transaction (tests, admin actions) its isolation applies.
    """
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _accepted_reason(accept_incomplete: str) -> str:
    if not isinstance(accept_incomplete, str):
        raise BillingError("accept_incomplete: give the reason as text")
    if accept_incomplete and not accept_incomplete.strip():
        raise BillingError("accept_incomplete: give the reason the month closes incomplete")
    if len(accept_incomplete) > 2000:
        raise BillingError("accept_incomplete: keep the reason under 2,000 characters")
    return accept_incomplete.strip()


def _ready_to_close(
    bounds: PeriodBounds, now: dt.datetime, accepted: str
) -> tuple[PriceBook, list[WindowProblem]]:
    """The book to price with, and the metering problems finance accepted (if it did)."""
    reasons = []
    if bounds.end > now:
        reasons.append(f"the month is not over until {bounds.end:%Y-%m-%dT%H:%M:%SZ}")
    incomplete = period_window_problems(bounds)
    # Never accepted with the incomplete ranges: nothing is missing, the pool is counted twice.
    reasons += [twice.message for twice in gpus_metered_twice(start=bounds.start, end=bounds.end)]
    # Nor windows of another step: priced beside this step's, a span would count twice (and
    # an enabled source holding them is metered no more: the month's missing ranges say where).
    reasons += [off.message for off in windows_off_step(start=bounds.start, end=bounds.end)]
    book = None
    try:
        book = price_book_in_force(bounds.first_day)
    except PriceBookNotFound as error:
        reasons.append(str(error))
    if reasons or (incomplete and not accepted):
        messages = [problem.message for problem in incomplete]
        raise PeriodCloseRefused(bounds.period, reasons + messages, incomplete)
    return book, incomplete


def _price_metering(bounds: PeriodBounds, book: PriceBook) -> PricedScenario:
    built = scenario_build(
        start=bounds.start,
        end=bounds.end,
        price_book=book,
        builder_version=SCENARIO_BUILDER_VERSION,  # the version _store_close records
    )
    return scenario_price(built)


def _close_rebuild(
    close: PeriodClose, bounds: PeriodBounds, latest: PeriodScenario, *, retake: bool = False
) -> BuiltScenario:
    """A closed month's scenario from today's metering, built as its close built it, with the
    SLOs its latest revision `latest` judged by (`PeriodScenario.service_slos`) and the
    kinds it priced its tasks as (`PeriodScenario.task_kinds`): a kind a task row took since,
    from a later month's pods, is not the kind it ran as in this one. With `retake`, the task
    rows' kinds (`period_close`'s `retake_kinds`)."""
    return scenario_build(
        start=bounds.start,
        end=bounds.end,
        price_book=close.price_book,
        builder_version=close.scenario_builder_version,
        slos=judged_slos(latest),
        kinds=None if retake else billed_kinds(latest),
    )


def _already_closed(close: PeriodClose) -> PeriodCloseOutcome:
    latest = PeriodScenario.objects.filter(period=close.period).order_by("-revision").first()
    try:
        with _metering_snapshot():
            built = _close_rebuild(close, closed_period_bounds(close), latest)
        changed = scenario_sha256(built) != latest.scenario_sha256
    except ScenarioError:
        changed = True  # the data changed into something unpriceable; verify_period says how
    return PeriodCloseOutcome(period_close=close, created=False, data_changed=changed)


# --- Corrections ----------------------------------------------------------------------


@dataclass
class _Delta:
    """The change of one line between what was billed and the re-priced month."""

    kind: str
    amount: Decimal = ZERO  # rounded
    amount_unrounded: Decimal = ZERO
    gpu_seconds: Decimal | None = None
    breached_intervals: Decimal | None = None
    rate_per_gpu_hour: Decimal | None = None
    rate_per_interval: Decimal | None = None
    # (is_service, pk) -> [unrounded amount, GPU-seconds]
    contributions: dict[tuple[bool, int], list[Decimal]] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (
            self.amount
            or self.amount_unrounded
            or self.gpu_seconds
            or self.breached_intervals
            or any(amount or seconds for amount, seconds in self.contributions.values())
        )


@dataclass(frozen=True)
class _Correction:
    period: str
    revision: int
    book: PriceBook
    priced: PricedScenario
    team_deltas: dict[str, list[_Delta]]
    platform_deltas: list[_Delta]
    pool_cost_delta: Decimal


def _corrections_due(
    period: str, recheck: set[str], retake: Collection[str] = ()
) -> tuple[list[_Correction], list[str]]:
    """Earlier closed months whose metering changed since they were last priced, and those
    withheld: a correction only comes from windows at or above TANDEM_MIN_COMPLETENESS, so a
    month with a window below it (an operator accepted a loss of samples) waits until its
    windows are complete again rather than refund what Prometheus forgot; and a month in
    which two sources meter one GPU waits until one of them stops, rather than bill it twice."""
    due, withheld = [], []
    closes = list(PeriodClose.objects.filter(period__lt=period).order_by("period"))
    archived = periods_archived([close.period for close in closes])
    for close in closes:
        latest = PeriodScenario.objects.filter(period=close.period).order_by("-revision").first()
        bounds = closed_period_bounds(close)  # as it was priced, whatever the zone is now
        windows = IngestWindow.objects.filter(start__lt=bounds.end, end__gt=bounds.start)
        late = windows.filter(
            Q(changed_after_first_write__gt=latest.created) | Q(first_written__gt=latest.created)
        )
        if close.period not in recheck and not late.exists():
            continue
        if close.period in archived:  # its metering is in files: the tables hold none of it
            logger.warning("corrections of %s withheld: its metering is archived", close.period)
            withheld.append(close.period)
            continue
        if windows.filter(completeness__lt=min_completeness()).exists():
            logger.warning("corrections of %s withheld: windows below completeness", close.period)
            withheld.append(close.period)
            continue
        if windows_off_step(start=bounds.start, end=bounds.end):
            # Rebuilt on the present step, its rows would misalign or regroup its preemptions:
            # withheld until the step is set back.
            logger.warning("corrections of %s withheld: windows of another step", close.period)
            withheld.append(close.period)
            continue
        if gpus_metered_twice(start=bounds.start, end=bounds.end) or windows_unsighted(
            start=bounds.start, end=bounds.end
        ):
            logger.warning(
                "corrections of %s withheld: GPUs metered by two sources, or windows beside"
                " another source's that cannot show it",
                close.period,
            )
            withheld.append(close.period)
            continue
        try:
            built = _close_rebuild(close, bounds, latest, retake=close.period in retake)
            digest = scenario_digest(built)
            if digest[1] != latest.scenario_sha256:
                due.append(_correction(close, latest, scenario_price(built, digest)))
        except ScenarioError as error:
            raise ScenarioError(f"re-pricing {close.period} for corrections: {error}") from None
    return due, withheld


def _correction(close: PeriodClose, latest: PeriodScenario, priced: PricedScenario) -> _Correction:
    # The engine's exact context: stored unrounded amounts have 30 decimal places (33 digits
    # for a line of hundreds), which Python's default 28-digit context would round while
    # summing what was billed, leaving every line of every team a few 1E-26 "changed".
    with localcontext(CONTEXT):
        return _correction_exact(close, latest, priced)


def _correction_exact(
    close: PeriodClose, latest: PeriodScenario, priced: PricedScenario
) -> _Correction:
    result = priced.result
    billed_lines, billed_contributions = _billed_team_lines(close.period)
    keys = {(team.team, line.kind) for team in result.teams for line in team.lines}
    keys |= set(billed_lines)
    team_deltas: dict[str, list[_Delta]] = defaultdict(list)
    for team, kind in sorted(keys):
        team_result = result.team(team)
        line = team_result.line(kind) if team_result else None
        delta = _line_delta(
            kind,
            line,
            billed_lines.get((team, kind), {}),
            billed_contributions.get((team, kind), {}),
            priced,
        )
        if not delta.is_empty:
            team_deltas[team].append(delta)
    billed_platform = _billed_platform_lines(close.period)
    platform_deltas = [
        delta
        for delta in (
            _line_delta(line.kind, line, billed_platform.get(line.kind, {}), {}, priced)
            for line in result.platform.lines
        )
        if not delta.is_empty
    ]
    return _Correction(
        period=close.period,
        revision=latest.revision + 1,
        book=close.price_book,
        priced=priced,
        team_deltas=dict(team_deltas),
        platform_deltas=platform_deltas,
        pool_cost_delta=result.pool_cost_rounded - latest.pool_cost,
    )


def _line_delta(
    kind: str,
    line: Line | None,
    billed: dict[str, Decimal],
    billed_contributions: dict[tuple[bool, int], list[Decimal]],
    priced: PricedScenario,
) -> _Delta:
    delta = _Delta(kind=kind)
    delta.amount = (line.rounded if line else ZERO) - billed.get("amount", ZERO)
    delta.amount_unrounded = (line.amount if line else ZERO) - billed.get("amount_unrounded", ZERO)
    if (line and line.gpu_seconds is not None) or billed.get("gpu_seconds") is not None:
        new = line.gpu_seconds if line and line.gpu_seconds is not None else ZERO
        delta.gpu_seconds = new - (billed.get("gpu_seconds") or ZERO)
    if (line and line.breached_intervals is not None) or billed.get("breached_intervals"):
        new = line.breached_intervals if line and line.breached_intervals is not None else ZERO
        delta.breached_intervals = new - (billed.get("breached_intervals") or ZERO)
    if line is not None:
        delta.rate_per_gpu_hour = line.rate_per_gpu_hour
        delta.rate_per_interval = line.rate_per_interval
    contributions = {
        key: [-amount, -seconds] for key, (amount, seconds) in billed_contributions.items()
    }
    for item in line.contributions if line else ():
        key = _contributor_key(item.id, item.is_service, priced)
        entry = contributions.setdefault(key, [ZERO, ZERO])
        entry[0] += item.amount
        entry[1] += item.gpu_seconds
    delta.contributions = {
        key: value for key, value in contributions.items() if value[0] or value[1]
    }
    return delta


def _contributor_key(
    scenario_id: str, is_service: bool, priced: PricedScenario
) -> tuple[bool, int]:
    pks = priced.built.service_pks if is_service else priced.built.task_pks
    return (is_service, pks[scenario_id])


def _billed_team_lines(period: str) -> tuple[dict, dict]:
    """What has been billed for `period` so far: its statement lines plus every correction
    of it, per (team, kind); and per-task (or service) contributions likewise."""
    lines = StatementLine.objects.filter(
        Q(statement__period=period, is_correction=False)
        | Q(is_correction=True, corrects_period=period)
    )
    billed: dict[tuple[str, str], dict[str, Decimal]] = {}
    for team, kind, amount, unrounded, seconds, breached in lines.values_list(
        "statement__team__name",
        "kind",
        "amount",
        "amount_unrounded",
        "quantity_gpu_seconds",
        "breached_intervals",
    ):
        entry = billed.setdefault((team, kind), {"amount": ZERO, "amount_unrounded": ZERO})
        entry["amount"] += amount
        entry["amount_unrounded"] += unrounded
        for name, value in (("gpu_seconds", seconds), ("breached_intervals", breached)):
            if value is not None:
                entry[name] = entry.get(name, ZERO) + value
    contributions: dict[tuple[str, str], dict[tuple[bool, int], list[Decimal]]] = {}
    rows = StatementLineTask.objects.filter(line__in=lines).values_list(
        "line__statement__team__name",
        "line__kind",
        "task_id",
        "service_id",
        "amount_unrounded",
        "gpu_seconds",
    )
    for team, kind, task_pk, service_pk, amount, seconds in rows:
        key = (True, service_pk) if service_pk else (False, task_pk)
        entry = contributions.setdefault((team, kind), {}).setdefault(key, [ZERO, ZERO])
        entry[0] += amount
        entry[1] += seconds or ZERO
    return billed, contributions


def _billed_platform_lines(period: str) -> dict[str, dict[str, Decimal]]:
    lines = PlatformLine.objects.filter(
        Q(period_close__period=period, is_correction=False)
        | Q(is_correction=True, corrects_period=period)
    )
    billed: dict[str, dict[str, Decimal]] = {}
    for name, amount, unrounded, seconds in lines.values_list(
        "name", "amount", "amount_unrounded", "quantity_gpu_seconds"
    ):
        entry = billed.setdefault(name, {"amount": ZERO, "amount_unrounded": ZERO})
        entry["amount"] += amount
        entry["amount_unrounded"] += unrounded
        if seconds is not None:
            entry["gpu_seconds"] = entry.get("gpu_seconds", ZERO) + seconds
    return billed


# --- Storing a close ------------------------------------------------------------------


def _store_close(
    bounds: PeriodBounds,
    book: PriceBook,
    priced: PricedScenario,
    corrections: list[_Correction],
    now: dt.datetime,
    accepted: str,
    incomplete: list[WindowProblem],
    blind: BlindSpots,
) -> PeriodClose:
    result = priced.result
    team_lines: dict[str, list[StatementLine]] = defaultdict(list)
    line_contributions: list[tuple[StatementLine, list[StatementLineTask]]] = []
    line_classes: list[tuple[StatementLine, list[StatementLineClass]]] = []
    for team_result in result.teams:
        for line in team_result.lines:
            row = _statement_line(line)
            team_lines[team_result.team].append(row)
            line_contributions.append((row, _contributions(line, priced)))
            line_classes.append((row, _class_parts(line)))
    for correction in corrections:
        for team, deltas in correction.team_deltas.items():
            for delta in deltas:
                row = _correction_line(delta, correction.period, book.currency)
                team_lines[team].append(row)
                line_contributions.append((row, _delta_contributions(delta)))
    platform_lines = [_platform_line(line) for line in result.platform.lines]
    platform_classes = [
        (row, _class_parts(line, PlatformLineClass))
        for row, line in zip(platform_lines, result.platform.lines, strict=True)
    ]
    for correction in corrections:
        platform_lines += [
            _platform_correction(delta, correction.period, book.currency)
            for delta in correction.platform_deltas
        ]
    totals = {team: sum((row.amount for row in rows), ZERO) for team, rows in team_lines.items()}
    close = PeriodClose.objects.create(
        period=bounds.period,
        timezone=bounds.timezone,
        period_start=bounds.start,
        period_end=bounds.end,
        price_book=book,
        price_book_version=book.version,
        engine_version=ENGINE_VERSION,
        scenario_builder_version=SCENARIO_BUILDER_VERSION,
        scenario_sha256=priced.sha256,
        currency=book.currency,
        standard_rate=result.rates.standard_per_gpu_hour,
        offpeak_rate=result.rates.offpeak_training_per_gpu_hour,
        pool_cost_unrounded=result.pool_cost,
        pool_cost=result.pool_cost_rounded,
        pool_cost_corrections=sum((item.pool_cost_delta for item in corrections), ZERO),
        teams_total=sum(totals.values(), ZERO),
        platform_total=sum((row.amount for row in platform_lines), ZERO),
        closed_at=now,
        # A complete month records no reason, even when finance gave one.
        incomplete_reason=accepted if incomplete else "",
        incomplete_ranges=[problem.as_record() for problem in incomplete],
        capacity_gpu_seconds_by_class={
            name: str(seconds) for name, seconds in result.capacity_gpu_seconds_by_class
        },
        **blind.closed(),
        unclassed_gpu_seconds=sum(priced.built.unclassed_capacity.values(), ZERO),
        unclassed_gpu_models=sorted(priced.built.unclassed_capacity),
    )
    _store_scenarios(close, book, priced, corrections, now)
    _store_statements(close, bounds, book, team_lines, totals, line_contributions)
    _store_class_parts(line_classes)
    for row in platform_lines:
        row.period_close = close
    PlatformLine.objects.bulk_create(platform_lines)
    _store_class_parts(platform_classes)
    _store_breaches(close, priced)
    return close


def _store_scenarios(
    close: PeriodClose,
    book: PriceBook,
    priced: PricedScenario,
    corrections: list[_Correction],
    now: dt.datetime,
) -> None:
    snapshots = [
        PeriodScenario(
            period=close.period,
            revision=0,
            priced_in=close,
            price_book=book,
            scenario_sha256=priced.sha256,
            pool_cost=priced.result.pool_cost_rounded,
            scenario_zlib=priced.scenario_zlib,
            created=now,
            service_slos=service_slos_of(priced.built),
            task_kinds=task_kinds_of(priced.built),
        )
    ]
    snapshots += [
        PeriodScenario(
            period=item.period,
            revision=item.revision,
            priced_in=close,
            price_book=item.book,
            scenario_sha256=item.priced.sha256,
            pool_cost=item.priced.result.pool_cost_rounded,
            scenario_zlib=item.priced.scenario_zlib,
            created=now,
            service_slos=service_slos_of(item.priced.built),
            task_kinds=task_kinds_of(item.priced.built),
        )
        for item in corrections
    ]
    PeriodScenario.objects.bulk_create(snapshots)


def _store_statements(
    close: PeriodClose,
    bounds: PeriodBounds,
    book: PriceBook,
    team_lines: dict[str, list[StatementLine]],
    totals: dict[str, Decimal],
    line_contributions: list[tuple[StatementLine, list[StatementLineTask]]],
) -> None:
    teams = Team.objects.in_bulk(list(team_lines), field_name="name")
    missing = sorted(set(team_lines) - set(teams))
    if missing:
        raise ScenarioError(f"teams: no metering team named {missing[0]!r}")
    statements = {
        name: Statement(
            period_close=close,
            period=bounds.period,
            team=teams[name],
            currency=book.currency,
            total=totals[name],
        )
        for name in sorted(team_lines)
    }
    Statement.objects.bulk_create(statements.values())
    for name, rows in team_lines.items():
        for row in rows:
            row.statement = statements[name]
    StatementLine.objects.bulk_create([row for rows in team_lines.values() for row in rows])
    contributions = []
    for row, items in line_contributions:
        for item in items:
            item.line = row
            contributions.append(item)
    StatementLineTask.objects.bulk_create(contributions, batch_size=5000)
    parts = []
    for contribution in contributions:
        for part in getattr(contribution, "_classes", ()):
            part.contribution = contribution
            parts.append(part)
    StatementLineTaskClass.objects.bulk_create(parts, batch_size=5000)


def _store_class_parts(
    line_classes: list[tuple[StatementLine, list[StatementLineClass]]]
    | list[tuple[PlatformLine, list[PlatformLineClass]]],
) -> None:
    """Each GPU-time line's (team or platform) parts per GPU class, after the lines (they
    need their ids)."""
    parts: list = []
    for row, items in line_classes:
        for item in items:
            item.line = row
            parts.append(item)
    if parts:
        type(parts[0]).objects.bulk_create(parts, batch_size=5000)


def _store_breaches(close: PeriodClose, priced: PricedScenario) -> None:
    SlaBreach.objects.bulk_create(
        SlaBreach(
            period_close=close,
            service_id=priced.built.service_pks[breach.service],
            interval_start=dt.datetime.fromtimestamp(breach.interval, dt.UTC),
            request_count=breach.request_count,
            p99_seconds=_finite_or_none(breach.p99_seconds),
            slo_p99_ms=breach.slo_p99_ms,
            is_peak=breach.is_peak,
            penalized=breach.penalized,
        )
        for breach in priced.result.sla_breaches
    )


def _finite_or_none(value: Decimal | None) -> Decimal | None:
    return value if value is not None and value.is_finite() else None


def _statement_line(line: Line) -> StatementLine:
    return StatementLine(
        kind=line.kind,
        quantity_gpu_seconds=line.gpu_seconds,
        quantity_gpu_hours=line.gpu_hours,
        rate_per_gpu_hour=line.rate_per_gpu_hour,
        breached_intervals=line.breached_intervals,
        rate_per_interval=line.rate_per_interval,
        amount_unrounded=line.amount,
        amount=line.rounded,
        description=line.description,
    )


def _class_parts(
    line: Line, model: type[StatementLineClass] | type[PlatformLineClass] = StatementLineClass
) -> list:
    """The line's exact part per GPU class (none on latency lines, which have no classes)."""
    return [
        model(
            gpu_class=part.gpu_class,
            quantity_gpu_seconds=part.gpu_seconds,
            quantity_gpu_hours=part.gpu_hours,
            rate_per_gpu_hour=part.rate_per_gpu_hour,
            amount_unrounded=part.amount,
        )
        for part in line.by_class
    ]


def _contributions(line: Line, priced: PricedScenario) -> list[StatementLineTask]:
    """The line's contributions, each with its unsaved parts per GPU class in `_classes`
    (stored once the contributions have ids, `_store_contribution_classes`)."""
    rows = []
    for item in line.contributions:
        is_service, pk = _contributor_key(item.id, item.is_service, priced)
        row = StatementLineTask(
            service_id=pk if is_service else None,
            task_id=None if is_service else pk,
            gpu_seconds=item.gpu_seconds,
            amount_unrounded=item.amount,
        )
        row._classes = [
            StatementLineTaskClass(
                gpu_class=part.gpu_class,
                gpu_seconds=part.gpu_seconds,
                amount_unrounded=part.amount,
            )
            for part in item.by_class
        ]
        rows.append(row)
    return rows


def _delta_contributions(delta: _Delta) -> list[StatementLineTask]:
    return [
        StatementLineTask(
            service_id=pk if is_service else None,
            task_id=None if is_service else pk,
            gpu_seconds=seconds,
            amount_unrounded=amount,
        )
        for (is_service, pk), (amount, seconds) in sorted(delta.contributions.items())
    ]


def _correction_line(delta: _Delta, period: str, currency: str) -> StatementLine:
    return StatementLine(
        kind=delta.kind,
        quantity_gpu_seconds=delta.gpu_seconds,
        quantity_gpu_hours=_hours(delta.gpu_seconds),
        rate_per_gpu_hour=delta.rate_per_gpu_hour,
        breached_intervals=delta.breached_intervals,
        rate_per_interval=delta.rate_per_interval,
        amount_unrounded=delta.amount_unrounded,
        amount=delta.amount,
        description=_correction_wording(LineKind(delta.kind).label, delta, period, currency),
        is_correction=True,
        corrects_period=period,
    )


def _platform_line(line: Line) -> PlatformLine:
    return PlatformLine(
        name=line.kind,
        quantity_gpu_seconds=line.gpu_seconds,
        rate_per_gpu_hour=line.rate_per_gpu_hour,
        amount_unrounded=line.amount,
        amount=line.rounded,
        description=line.description,
    )


def _platform_correction(delta: _Delta, period: str, currency: str) -> PlatformLine:
    return PlatformLine(
        name=delta.kind,
        quantity_gpu_seconds=delta.gpu_seconds,
        rate_per_gpu_hour=delta.rate_per_gpu_hour,
        amount_unrounded=delta.amount_unrounded,
        amount=delta.amount,
        description=_correction_wording(
            PlatformLineName(delta.kind).label, delta, period, currency
        ),
        is_correction=True,
        corrects_period=period,
    )


def _hours(gpu_seconds: Decimal | None) -> Decimal | None:
    return None if gpu_seconds is None else hours(gpu_seconds)


def _correction_wording(label: str, delta: _Delta, period: str, currency: str) -> str:
    """E.g. "Correction of September 2026 (usage at the standard rate): late metering data
    re-priced the month; +1.25 GPU-hours, +17.97 CNY."""
    parts = []
    if delta.gpu_seconds:
        parts.append(f"{_hours(delta.gpu_seconds):+} GPU-hours")
    if delta.breached_intervals:
        parts.append(f"{delta.breached_intervals.normalize():+} breached intervals")
    parts.append(f"{delta.amount:+} {currency}")
    return (
        f"Correction of {period_label(period)} ({label.lower()}): metering data that arrived "
        f"after that month was closed re-priced it; difference {', '.join(parts)}."
    )


# --- Scheduled close --------------------------------------------------------------------

# The name it had before services were split by concern: log settings and alerts know it.
logger = logging.getLogger("billing.services")


def period_close_due(*, now: dt.datetime | None = None) -> str | None:
    """Close the month before `now` once it is complete; None when nothing was due.

    Due means: not closed yet, the month ended at least TANDEM_INGEST_LAG_SECONDS ago, every
    source's ingestion has reached the month's end, and the close's own checks pass. A close
    that is refused (a window pending, incomplete) is logged and tried again on the next run.
    """
    now = now or timezone.now()
    period = period_previous(period_containing(now))
    if PeriodClose.objects.filter(period=period).exists():
        return None
    bounds = period_bounds(period)
    lag = dt.timedelta(seconds=settings.TANDEM_INGEST_LAG_SECONDS)
    if now < bounds.end + lag:
        return None
    ingested = ingested_until(now)
    if ingested is None or ingested < bounds.end:
        logger.info("not closing %s yet: ingestion has reached %s", period, ingested)
        return None
    try:
        period_close(period=period, now=now)
    except PeriodCloseRefused as error:
        # Never accepted here: a short month waits for ingestion, or for finance's reason.
        reasons = "\n".join(f"  - {reason}" for reason in error.reasons)
        logger.warning("not closing %s yet:\n%s", period, reasons)
        return None
    return period
