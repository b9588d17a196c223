"""The pricing rules of docs/pricing.md, version 2 (GPU classes, preemptions across periods),
applied to one validated scenario. A scenario with one class and no earlier preemptions
prices exactly as version 1."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, Inexact, localcontext

from billing.pricing import wording
from billing.pricing.model import (
    DEFAULT_CLASS,
    ONE,
    ClassFigures,
    ClassIndex,
    Preemption,
    PriceBook,
    Scenario,
    ScenarioError,
    ScenarioIndex,
)
from billing.pricing.money import (
    CONTEXT,
    SECONDS_PER_HOUR,
    ZERO,
    per_hour,
    round_money,
    scaled,
    scaled_each,
)
from billing.pricing.result import (
    TEAM_LINE_KINDS,
    Breach,
    ClassPart,
    CompensatedPreemption,
    Contribution,
    Line,
    PlatformResult,
    PricingResult,
    Rates,
    TeamResult,
)
from billing.pricing.times import epoch_seconds, local_hour, zone
from kernel.histogram import P99, histogram_quantile, interval_breached
from kernel.lost_work import lost_gpu_seconds

ENGINE_VERSION = "2.0.0"

# Per line kind: task (or service) id -> [unrounded amount, GPU-seconds].
Ledger = dict[str, list[Decimal]]
# Per line kind: task id -> class -> [unrounded amount, GPU-seconds] (the ledger's parts).
ClassLedger = dict[str, dict[str, list[Decimal]]]
SLA_LINE_KINDS = ("sla_penalty", "sla_credit")
CLASSED_LINE_KINDS = ("baseline", "standard", "offpeak", "compensation")


def price(scenario: Scenario) -> PricingResult:
    """Price a scenario by docs/pricing.md version 2 and return every figure a statement needs.

    Included: pool cost, the reserved inference baseline, usage at the standard and off-peak
    rates, SLA penalties and credits, starvation compensation, and the platform balance with
    its named lines; rules 1, 2, 3, 5 and 6 per GPU class (each its own sub-pool with its
    own rates and reserve), rule 4 over all classes. A team line is the exact sum over classes
    of its unrounded amounts, rounded once (ROUND_HALF_UP, currency minor unit); a team total
    is the sum of its rounded lines; the platform's `rounding` line absorbs the cents so that
    `round(pool cost) = Σ team totals + platform balance` exactly. Nothing else is rounded.
    Busy time, memory and I/O are not priced.
    """
    if not isinstance(scenario, Scenario):
        raise TypeError(f"price() takes a Scenario, not {type(scenario).__name__}")
    with localcontext(CONTEXT):
        try:
            return _price(scenario)
        except Inexact:
            raise ScenarioError(
                "scenario: a value has more digits than the engine's exact 60-digit arithmetic "
                "holds; give amounts and quantities at most 30 decimal places"
            ) from None


def derive_rates(book: PriceBook) -> Rates:
    """The `default` class's rates (the book's own D, F, W): R = D + F + E*W and
    R_off = D + E*W, per GPU-hour, exact (never rounded)."""
    return derive_class_rates(book)[DEFAULT_CLASS]


def derive_class_rates(book: PriceBook) -> dict[str, Rates]:
    """Per class of the book (`default` included, by name): R_c = D_c + F_c + E*W_c and
    R_off,c = D_c + E*W_c, per GPU-hour, exact (never rounded)."""
    return {name: _class_rates(book, figures) for name, figures in book.class_figures().items()}


def _class_rates(book: PriceBook, figures: ClassFigures) -> Rates:
    with localcontext(CONTEXT):
        electricity = book.electricity_per_kwh * figures.gpu_average_power_kw
        standard = figures.depreciation_per_gpu_hour + figures.facility_per_gpu_hour + electricity
        offpeak = figures.depreciation_per_gpu_hour + electricity
    return Rates(
        currency=book.currency,
        depreciation_per_gpu_hour=figures.depreciation_per_gpu_hour,
        facility_per_gpu_hour=figures.facility_per_gpu_hour,
        electricity_per_kwh=book.electricity_per_kwh,
        gpu_average_power_kw=figures.gpu_average_power_kw,
        electricity_per_gpu_hour=electricity,
        standard_per_gpu_hour=standard,
        offpeak_training_per_gpu_hour=offpeak,
        derivation=wording.rate_derivation(
            book,
            figures.name,
            figures.depreciation_per_gpu_hour,
            figures.facility_per_gpu_hour,
            figures.gpu_average_power_kw,
            standard,
            offpeak,
        ),
        gpu_class=figures.name,
    )


@dataclass(slots=True)
class _ClassPrice:
    """One class priced as a sub-pool (rules 1-3)."""

    rates: Rates
    share: Decimal  # s_c
    usage: _UsageTotals
    cost: Decimal  # C_c
    baseline: Decimal  # B_c = s_c * C_c


def _price(scenario: Scenario) -> PricingResult:
    book = scenario.price_book
    class_rates = derive_class_rates(book)
    figures = book.class_figures()
    is_peak = _peak_clock(book)
    training = {task_id: task.is_training for task_id, task in scenario.index.tasks.items()}
    classes = {}
    for name, index in scenario.index.classes.items():
        share, rates = figures[name].reserved_inference_share, class_rates[name]
        usage = _price_usage(index, training, share, is_peak)
        cost = per_hour(usage.capacity, rates.standard_per_gpu_hour)
        classes[name] = _ClassPrice(rates, share, usage, cost, scaled(cost, share))
    pool_cost = sum((item.cost for item in classes.values()), ZERO)
    baseline = sum((item.baseline for item in classes.values()), ZERO)
    training_held = _training_held(classes)
    breaches = _find_breaches(scenario, is_peak, training_held)
    sla = _price_breaches(scenario.index, breaches, book.sla_penalty_per_interval)
    compensated = _price_starvation(scenario, class_rates, is_peak)
    ledgers, parts = _ledgers(classes, sla, compensated)
    shares = {name: figures[name].reserved_inference_share for name in figures}
    teams = _team_results(scenario, ledgers, parts, sla, classes, baseline, shares)
    pool_cost_rounded = round_money(pool_cost, book.currency)
    platform = _platform(book, classes, compensated, pool_cost_rounded, teams)
    intervals = sorted(scenario.index.capacity)
    return PricingResult(
        engine_version=ENGINE_VERSION,
        currency=book.currency,
        timezone=book.timezone,
        step_seconds=scenario.step_seconds,
        period_start=intervals[0] if intervals else None,
        period_end=intervals[-1] + scenario.step_seconds if intervals else None,
        rates=class_rates[DEFAULT_CLASS],
        rates_by_class=tuple(class_rates.values()),
        capacity_gpu_seconds=sum((item.usage.capacity for item in classes.values()), ZERO),
        capacity_gpu_seconds_by_class=tuple(
            (name, item.usage.capacity) for name, item in classes.items()
        ),
        pool_cost=pool_cost,
        pool_cost_rounded=pool_cost_rounded,
        reserved_baseline=baseline,
        teams=teams,
        platform=platform,
        sla_breaches=breaches,
        compensated_preemptions=compensated,
    )


def _training_held(classes: dict[str, _ClassPrice]) -> dict[int, Decimal]:
    """T(i) = Σ_{training t} a(t,i) over all classes, where > 0 (rule 4)."""
    held = [item.usage.training_held for item in classes.values() if item.usage.training_held]
    if len(held) <= 1:
        return held[0] if held else {}
    summed: dict[int, Decimal] = {}
    for per_interval in held:
        for interval, seconds in per_interval.items():
            summed[interval] = summed.get(interval, ZERO) + seconds
    return summed


def _peak_clock(book: PriceBook) -> Callable[[int], bool]:
    """is_peak(instant): the local hour of the instant is in `peak_hours` (cached by minute)."""
    tz = zone(book.timezone)
    hours_seen: dict[int, bool] = {}

    def is_peak(epoch: int) -> bool:
        # Offsets are whole minutes, so the local hour is constant within a UTC minute.
        minute = epoch - epoch % 60
        peak = hours_seen.get(minute)
        if peak is None:
            peak = hours_seen[minute] = book.is_peak_hour(local_hour(minute, tz))
        return peak

    return is_peak


@dataclass(slots=True)
class _UsageTotals:
    """Rules 1-3 per interval, summed (all sums exact, in GPU-seconds)."""

    capacity: Decimal  # Σ cap(i)
    covered: dict[str, Decimal]  # inference task -> Σ c(t,i)
    standard: dict[str, Decimal]  # task -> billable GPU-seconds at R
    offpeak: dict[str, Decimal]  # training task -> billable GPU-seconds at R_off
    idle: Decimal  # Σ max(0, shared(i) - billable(i))
    resold: Decimal  # Σ max(0, billable(i) - shared(i))
    offpeak_training: Decimal  # training GPU-seconds in off-peak intervals
    training_held: dict[int, Decimal]  # interval -> T(i), where > 0


def _price_usage(
    index: ClassIndex,
    training: dict[str, bool],
    share: Decimal,
    is_peak: Callable[[int], bool],
) -> _UsageTotals:
    """Rules 1-3 for one class: one pass over its usage, interval by interval (hot loop:
    plain dicts and Decimals)."""
    totals = _UsageTotals(ZERO, {}, {}, {}, ZERO, ZERO, ZERO, {})
    covered, standard = totals.covered, totals.standard
    for interval in sorted(index.capacity):
        capacity = index.capacity[interval]
        totals.capacity += capacity
        reserve = share * capacity
        peak = is_peak(interval)
        training_line = standard if peak else totals.offpeak
        trained = inference = ZERO
        inference_rows = []
        for task, alloc in index.usage.get(interval, {}).items():
            if training[task]:
                trained += alloc
                training_line[task] = training_line.get(task, ZERO) + alloc
            else:
                inference += alloc
                inference_rows.append((task, alloc))
        cover = inference if inference <= reserve else reserve
        for task, alloc in inference_rows:
            # c(t,i) = a(t,i) * cov(i) / I(i); exact when the reserve covers all inference.
            part = alloc if cover == inference else scaled(alloc, cover, inference)
            covered[task] = covered.get(task, ZERO) + part
            if part != alloc:
                standard[task] = standard.get(task, ZERO) + (alloc - part)
        # billable(i) = Σ b(t,i) = I(i) - cov(i) + T(i), exactly.
        surplus = (capacity - reserve) - (inference - cover + trained)
        if surplus > ZERO:
            totals.idle += surplus
        else:
            totals.resold -= surplus
        if trained > ZERO:
            totals.training_held[interval] = trained
            if not peak:
                totals.offpeak_training += trained
    return totals


def _find_breaches(
    scenario: Scenario, is_peak: Callable[[int], bool], training_held: dict[int, Decimal]
) -> tuple[Breach, ...]:
    """Rule 4's test: request count ≥ M and P99 > the objective. Ordered tightest objective
    first, then by service id and interval, whatever the order of the records."""
    book, services = scenario.price_book, scenario.index.services
    breaches = []
    for record in scenario.latency:
        service = services[record.service]
        if not interval_breached(
            record.buckets, slo_p99_ms=service.slo_p99_ms, min_requests=book.sla_min_requests
        ):
            continue
        held = training_held.get(record.interval, ZERO)
        peak = is_peak(record.interval)
        breaches.append(
            Breach(
                service=service.id,
                team=service.team,
                interval=record.interval,
                request_count=record.request_count,
                p99_seconds=histogram_quantile(P99, record.buckets),
                slo_p99_ms=service.slo_p99_ms,
                is_peak=peak,
                training_gpu_seconds=held,
                penalized=peak and held > ZERO,
            )
        )
    breaches.sort(key=lambda breach: (breach.slo_p99_ms, breach.service, breach.interval))
    return tuple(breaches)


@dataclass(slots=True)
class _SlaTotals:
    penalty: Ledger  # training task -> [amount, GPU-seconds held in penalized intervals]
    credit: Ledger  # service -> [amount (positive), T(i) summed]
    credit_intervals: dict[str, Decimal]  # service -> penalized intervals


def _price_breaches(
    index: ScenarioIndex, breaches: tuple[Breach, ...], penalty: Decimal
) -> _SlaTotals:
    """Rule 4's money: X per penalized breach, split over training tasks by a(t,i) / T(i),
    credited to the service's team. The last task (by id) of an interval takes the remainder
    of X, so penalties and credits cancel exactly."""
    totals = _SlaTotals({}, {}, {})
    training = {task_id for task_id, task in index.tasks.items() if task.is_training}
    penalties = totals.penalty
    for breach in breaches:
        if not breach.penalized:
            continue
        rows = index.usage[breach.interval]
        held = sorted(rows.keys() & training)
        allocs = list(map(rows.__getitem__, held))
        if ZERO in allocs:  # a training task holding nothing this interval pays nothing
            held = [task for task, alloc in zip(held, allocs, strict=True) if alloc > ZERO]
            allocs = list(map(rows.__getitem__, held))
        if held:
            amounts = scaled_each(penalty, allocs[:-1], breach.training_gpu_seconds)
            amount_left = penalty
            for amount in amounts:
                amount_left -= amount
            amounts.append(amount_left)  # the last task takes the remainder
            for task, amount, alloc in zip(held, amounts, allocs, strict=True):
                entry = penalties.get(task)
                if entry is None:
                    penalties[task] = [amount, alloc]
                else:
                    entry[0] += amount
                    entry[1] += alloc
        _post(totals.credit, breach.service, penalty, breach.training_gpu_seconds)
        totals.credit_intervals[breach.service] = (
            totals.credit_intervals.get(breach.service, ZERO) + ONE
        )
    return totals


def _post(ledger: Ledger, key: str, amount: Decimal, gpu_seconds: Decimal) -> None:
    entry = ledger.get(key)
    if entry is None:
        ledger[key] = [amount, gpu_seconds]
    else:
        entry[0] += amount
        entry[1] += gpu_seconds


def _price_starvation(
    scenario: Scenario, class_rates: dict[str, Rates], is_peak: Callable[[int], bool]
) -> tuple[CompensatedPreemption, ...]:
    """Rule 5: a training task's preemptions are numbered from its first ever, in time order
    (ties by pod): the period's first is `preemptions_before + 1`. Each beyond the N-th
    earns lost * rate / 3600; lost is reported, else min(cap, seconds run) * GPUs, and the
    rate is its class's R in a peak interval, R_off off-peak."""
    book, tasks = scenario.price_book, scenario.index.tasks
    by_task: dict[str, list[Preemption]] = {}
    for event in scenario.preemptions:
        if tasks[event.task].is_training:
            by_task.setdefault(event.task, []).append(event)
    credits = []
    for task in sorted(by_task):
        events = sorted(by_task[task], key=lambda event: (event.at, event.pod))
        before = tasks[task].preemptions_before
        for number, event in enumerate(events, start=before + 1):
            if number > book.starvation_preemption_threshold:
                rates = class_rates[event.gpu_class]
                credits.append(_compensate(scenario, rates, is_peak, event, number))
    return tuple(credits)


def _compensate(
    scenario: Scenario,
    rates: Rates,
    is_peak: Callable[[int], bool],
    event: Preemption,
    number: int,
) -> CompensatedPreemption:
    book = scenario.price_book
    reported = event.lost_gpu_seconds is not None
    # Without a report, an exact product: the context traps any loss of digits.
    lost = lost_gpu_seconds(
        reported=event.lost_gpu_seconds,
        seconds_since_start=event.seconds_since_start,
        gpus=event.gpus,
        cap_seconds=book.starvation_lost_work_cap_seconds,
    )
    epoch = epoch_seconds(event.at)
    peak = is_peak(epoch - epoch % scenario.step_seconds)
    rate = rates.standard_per_gpu_hour if peak else rates.offpeak_training_per_gpu_hour
    return CompensatedPreemption(
        task=event.task,
        team=scenario.index.tasks[event.task].team,
        at=event.at,
        number=number,
        lost_gpu_seconds=lost,
        lost_was_reported=reported,
        rate_per_gpu_hour=rate,
        amount=per_hour(lost, rate),
        gpu_class=event.gpu_class,
    )


def _ledgers(
    classes: dict[str, _ClassPrice],
    sla: _SlaTotals,
    compensated: tuple[CompensatedPreemption, ...],
) -> tuple[dict[str, Ledger], dict[str, ClassLedger]]:
    """Per line kind, what each task (or service) contributes: [unrounded amount, GPU-s],
    summed over classes exactly; and, for GPU-time lines, each class's part of it."""
    ledgers: dict[str, Ledger] = {kind: {} for kind in TEAM_LINE_KINDS}
    parts: dict[str, ClassLedger] = {kind: {} for kind in CLASSED_LINE_KINDS}
    for name, item in classes.items():
        usage, rates = item.usage, item.rates
        covered_total = sum(usage.covered.values(), ZERO)
        for task, seconds in usage.covered.items():
            if seconds > ZERO:
                amount = scaled(item.baseline, seconds, covered_total)
                _post_part(ledgers, parts, "baseline", task, name, amount, seconds)
        for task, seconds in usage.standard.items():
            amount = per_hour(seconds, rates.standard_per_gpu_hour)
            _post_part(ledgers, parts, "standard", task, name, amount, seconds)
        for task, seconds in usage.offpeak.items():
            amount = per_hour(seconds, rates.offpeak_training_per_gpu_hour)
            _post_part(ledgers, parts, "offpeak", task, name, amount, seconds)
    for credit in compensated:
        _post_part(
            ledgers,
            parts,
            "compensation",
            credit.task,
            credit.gpu_class,
            -credit.amount,
            credit.lost_gpu_seconds,
        )
    ledgers["sla_penalty"] = sla.penalty
    ledgers["sla_credit"] = {
        service: [-amount, held] for service, (amount, held) in sla.credit.items()
    }
    return ledgers, parts


def _post_part(
    ledgers: dict[str, Ledger],
    parts: dict[str, ClassLedger],
    kind: str,
    key: str,
    gpu_class: str,
    amount: Decimal,
    gpu_seconds: Decimal,
) -> None:
    _post(ledgers[kind], key, amount, gpu_seconds)
    _post(parts[kind].setdefault(key, {}), gpu_class, amount, gpu_seconds)


def _team_results(
    scenario: Scenario,
    ledgers: dict[str, Ledger],
    parts: dict[str, ClassLedger],
    sla: _SlaTotals,
    classes: dict[str, _ClassPrice],
    baseline: Decimal,
    shares: dict[str, Decimal],
) -> tuple[TeamResult, ...]:
    """Every team that owns a task or a service, by name, with its non-empty lines."""
    index = scenario.index
    owners = {task_id: task.team for task_id, task in index.tasks.items()}
    service_owners = {service_id: service.team for service_id, service in index.services.items()}
    covered = sum((entry[1] for entry in ledgers["baseline"].values()), ZERO)
    results = []
    for team in sorted(set(owners.values()) | set(service_owners.values())):
        context = wording.TeamContext(
            team=team,
            book=scenario.price_book,
            baseline=baseline,
            covered_gpu_seconds=covered,
            class_shares=shares,
        )
        lines = []
        for kind in TEAM_LINE_KINDS:
            members = service_owners if kind == "sla_credit" else owners
            money_only = kind in SLA_LINE_KINDS  # no line for a penalty of zero
            ids = sorted(
                key
                for key, (amount, gpu_seconds) in ledgers[kind].items()
                if members.get(key) == team and (amount or (gpu_seconds and not money_only))
            )
            if not ids:
                continue
            if money_only:
                lines.append(_sla_line(kind, ids, ledgers[kind], sla, context))
            else:
                by_class = _class_parts(kind, ids, parts[kind], classes)
                lines.append(
                    _team_line(kind, ids, ledgers[kind], parts[kind], by_class, classes, context)
                )
        total = sum((line.rounded for line in lines), ZERO)
        results.append(TeamResult(team=team, lines=tuple(lines), total=total))
    return tuple(results)


def _contributions(
    kind: str,
    ids: list[str],
    ledger: Ledger,
    parts: ClassLedger | None = None,
    classes: dict[str, _ClassPrice] | None = None,
) -> tuple[Contribution, ...]:
    """Each task's (or service's) part of a line; on GPU-time lines (`parts` given) with its
    exact part per class, in the classes' order, which sum to it."""
    return tuple(
        Contribution(
            id=key,
            is_service=kind == "sla_credit",
            amount=ledger[key][0],
            gpu_seconds=ledger[key][1],
            by_class=()
            if parts is None or classes is None
            else tuple(
                ClassPart(name, entry[1], entry[0], _book_rate(kind, classes[name].rates))
                for name in classes
                if (entry := parts.get(key, {}).get(name)) is not None
            ),
        )
        for key in ids
    )


def _class_parts(
    kind: str, ids: list[str], parts: ClassLedger, classes: dict[str, _ClassPrice]
) -> tuple[ClassPart, ...]:
    """The line's part per class (by name): the exact sums of its tasks' parts."""
    result = []
    for name, item in classes.items():
        amount = gpu_seconds = ZERO
        for key in ids:
            entry = parts.get(key, {}).get(name)
            if entry is not None:
                amount += entry[0]
                gpu_seconds += entry[1]
        if amount or gpu_seconds:
            rate = _book_rate(kind, item.rates)
            result.append(ClassPart(name, gpu_seconds, amount, rate))
    return tuple(result)


def _book_rate(kind: str, rates: Rates) -> Decimal | None:
    if kind == "standard":
        return rates.standard_per_gpu_hour
    if kind == "offpeak":
        return rates.offpeak_training_per_gpu_hour
    return None


def _team_line(
    kind: str,
    ids: list[str],
    ledger: Ledger,
    parts: ClassLedger,
    by_class: tuple[ClassPart, ...],
    classes: dict[str, _ClassPrice],
    context: wording.TeamContext,
) -> Line:
    """One GPU-time line (baseline, standard, off-peak, compensation): the exact sum of its
    contributions over all classes, rounded once."""
    contributions = _contributions(kind, ids, ledger, parts, classes)
    amount = sum((item.amount for item in contributions), ZERO)
    gpu_seconds = sum((item.gpu_seconds for item in contributions), ZERO)
    rate = _line_rate(kind, by_class, classes[DEFAULT_CLASS].rates, amount, gpu_seconds)
    return Line(
        kind=kind,
        amount=amount,
        rounded=round_money(amount, context.book.currency),
        description=wording.team_line(kind, context, gpu_seconds, rate, amount, by_class),
        gpu_seconds=gpu_seconds,
        rate_per_gpu_hour=rate,
        contributions=contributions,
        by_class=by_class,
    )


def _sla_line(
    kind: str, ids: list[str], ledger: Ledger, sla: _SlaTotals, context: wording.TeamContext
) -> Line:
    """One latency line (rule 4, over all classes): its exact sum, rounded once."""
    contributions = _contributions(kind, ids, ledger)
    amount = sum((item.amount for item in contributions), ZERO)
    intervals = _breached_intervals(kind, ids, amount, sla, context.book)
    return Line(
        kind=kind,
        amount=amount,
        rounded=round_money(amount, context.book.currency),
        description=wording.sla_line(kind, context, ids, intervals, amount),
        breached_intervals=intervals,
        rate_per_interval=context.book.sla_penalty_per_interval,
        contributions=contributions,
    )


def _breached_intervals(
    kind: str, ids: list[str], amount: Decimal, sla: _SlaTotals, book: PriceBook
) -> Decimal:
    """A penalty line's share of breached intervals, sum of a(t,i) / T(i) = amount / X; a
    credit line's count of penalized intervals."""
    if kind == "sla_credit":
        return sum((sla.credit_intervals[key] for key in ids), ZERO)
    return scaled(amount, ONE, book.sla_penalty_per_interval)


def _line_rate(
    kind: str,
    by_class: tuple[ClassPart, ...],
    default_rates: Rates,
    amount: Decimal,
    gpu_seconds: Decimal,
) -> Decimal:
    """The book rate of a standard or off-peak line when its classes share one rate (the
    `default` rate when it has none), else, and for baseline and compensation, the
    effective rate amount * 3600 / GPU-seconds."""
    if kind in ("standard", "offpeak"):
        book_rates = {part.rate_per_gpu_hour for part in by_class}
        if len(book_rates) <= 1:
            return book_rates.pop() if book_rates else _book_rate(kind, default_rates)
    if gpu_seconds == ZERO:
        return ZERO
    return scaled(abs(amount), SECONDS_PER_HOUR, gpu_seconds)


def _platform(
    book: PriceBook,
    classes: dict[str, _ClassPrice],
    compensated: tuple[CompensatedPreemption, ...],
    pool_cost_rounded: Decimal,
    teams: tuple[TeamResult, ...],
) -> PlatformResult:
    """Rule 6: the balance `round(C) - Σ team totals` and its named lines, each the sum over
    classes of the per-class formula."""
    idle, resold, discount, unassigned = [], [], [], []
    for name, item in classes.items():
        usage, rates = item.usage, item.rates
        standard = rates.standard_per_gpu_hour
        off = standard - rates.offpeak_training_per_gpu_hour
        idle.append(ClassPart(name, usage.idle, per_hour(usage.idle, standard), standard))
        resold.append(ClassPart(name, usage.resold, -per_hour(usage.resold, standard), standard))
        training = usage.offpeak_training
        discount.append(ClassPart(name, training, per_hour(training, off), off))
        if item.baseline and sum(usage.covered.values(), ZERO) == ZERO:
            unassigned.append(ClassPart(name, ZERO, item.baseline, None))
    default = classes[DEFAULT_CLASS].rates
    credits = [
        ClassPart(
            credit.gpu_class, credit.lost_gpu_seconds, credit.amount, credit.rate_per_gpu_hour
        )
        for credit in compensated
    ]
    standard = default.standard_per_gpu_hour
    offpeak = standard - default.offpeak_training_per_gpu_hour
    lines = [
        _platform_line(book, "idle_capacity", idle, standard),
        _platform_line(book, "reserve_resold", resold, standard),
        _platform_line(book, "offpeak_discount", discount, offpeak),
        _platform_line(book, "starvation_compensation", _merged(credits), None),
        _platform_line(book, "unassigned_reservation", unassigned, None),
    ]
    balance = pool_cost_rounded - sum((team.total for team in teams), ZERO)
    rounding = balance - sum((line.rounded for line in lines), ZERO)
    lines.append(
        Line(
            kind="rounding",
            amount=rounding,
            rounded=rounding,
            description=wording.platform_line("rounding", book, None, None, rounding),
        )
    )
    return PlatformResult(lines=tuple(lines), total=balance)


def _merged(parts: list[ClassPart]) -> list[ClassPart]:
    """Parts of one class summed into one, by class name (rates dropped: they may differ)."""
    summed: dict[str, list[Decimal]] = {}
    for part in parts:
        _post(summed, part.gpu_class, part.amount, part.gpu_seconds)
    return [
        ClassPart(name, gpu_seconds, amount, None)
        for name, (amount, gpu_seconds) in sorted(summed.items())
    ]


def _platform_line(
    book: PriceBook, kind: str, parts: list[ClassPart], default_rate: Decimal | None
) -> Line:
    """A named platform line: exact sums over classes, its rate as `_line_rate` picks it."""
    amount = sum((part.amount for part in parts), ZERO)
    used = [part for part in parts if part.gpu_seconds or part.amount]
    gpu_seconds = None
    rate = default_rate
    if kind == "starvation_compensation":
        gpu_seconds = sum((part.gpu_seconds for part in parts), ZERO)
    elif kind != "unassigned_reservation":
        gpu_seconds = sum((part.gpu_seconds for part in parts), ZERO)
        rates = {part.rate_per_gpu_hour for part in used}
        if len(rates) == 1:
            rate = rates.pop()
        elif rates:
            rate = scaled(abs(amount), SECONDS_PER_HOUR, gpu_seconds)
    by_class = tuple(used)
    return Line(
        kind=kind,
        amount=amount,
        rounded=round_money(amount, book.currency),
        description=wording.platform_line(kind, book, rate, gpu_seconds, amount, by_class),
        gpu_seconds=gpu_seconds,
        rate_per_gpu_hour=rate,
        by_class=by_class,
    )
