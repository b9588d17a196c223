"""The pricing rules of pricing.md, version 1, applied to one validated scenario."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, Inexact, localcontext

from billing.pricing import wording
from billing.pricing.model import (
    ONE,
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
)
from billing.pricing.quantile import P99, exceeds_objective, histogram_quantile
from billing.pricing.result import (
    TEAM_LINE_KINDS,
    Breach,
    CompensatedPreemption,
    Contribution,
    Line,
    PlatformResult,
    PricingResult,
    Rates,
    TeamResult,
)
from billing.pricing.times import epoch_seconds, local_hour, zone

ENGINE_VERSION = "1.0.0"

# Per line kind: task (or service) id -> (unrounded amount, GPU-seconds).
Ledger = dict[str, list[Decimal]]
SLA_LINE_KINDS = ("sla_penalty", "sla_credit")


def price(scenario: Scenario) -> PricingResult:
    """Price a scenario by pricing.md version 1 and return every figure a statement needs.

    Included: pool cost, the reserved inference baseline, usage at the standard and off-peak
    rates, SLA penalties and credits, starvation compensation, and the platform balance with
    its named lines. Each team line is rounded once (ROUND_HALF_UP, currency minor unit); a
    team total is the sum of its rounded lines; the platform's `rounding` line absorbs the
    cents so that `round(pool cost) = Σ team totals + platform balance` exactly. Nothing
    else is rounded. Busy time, memory and I/O are not priced (version 1).
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
    """R = D + F + E*W and R_off = D + E*W, per GPU-hour, exact (never rounded)."""
    with localcontext(CONTEXT):
        electricity = book.electricity_per_kwh * book.gpu_average_power_kw
        standard = book.depreciation_per_gpu_hour + book.facility_per_gpu_hour + electricity
        offpeak = book.depreciation_per_gpu_hour + electricity
    return Rates(
        currency=book.currency,
        depreciation_per_gpu_hour=book.depreciation_per_gpu_hour,
        facility_per_gpu_hour=book.facility_per_gpu_hour,
        electricity_per_kwh=book.electricity_per_kwh,
        gpu_average_power_kw=book.gpu_average_power_kw,
        electricity_per_gpu_hour=electricity,
        standard_per_gpu_hour=standard,
        offpeak_training_per_gpu_hour=offpeak,
        derivation=wording.rate_derivation(book, standard, offpeak),
    )


def _price(scenario: Scenario) -> PricingResult:
    book = scenario.price_book
    rates = derive_rates(book)
    is_peak = _peak_clock(book)
    usage = _price_usage(scenario.index, book.reserved_inference_share, is_peak)
    pool_cost = per_hour(usage.capacity, rates.standard_per_gpu_hour)
    baseline = scaled(pool_cost, book.reserved_inference_share)
    breaches = _find_breaches(scenario, is_peak, usage.training_held)
    sla = _price_breaches(scenario.index, breaches, book.sla_penalty_per_interval)
    compensated = _price_starvation(scenario, rates, is_peak)
    ledgers = _ledgers(usage, rates, baseline, sla, compensated)
    teams = _team_results(scenario, ledgers, sla, rates, baseline)
    pool_cost_rounded = round_money(pool_cost, book.currency)
    platform = _platform(book, rates, usage, baseline, compensated, pool_cost_rounded, teams)
    intervals = sorted(scenario.index.capacity)
    return PricingResult(
        engine_version=ENGINE_VERSION,
        currency=book.currency,
        timezone=book.timezone,
        step_seconds=scenario.step_seconds,
        period_start=intervals[0] if intervals else None,
        period_end=intervals[-1] + scenario.step_seconds if intervals else None,
        rates=rates,
        capacity_gpu_seconds=usage.capacity,
        pool_cost=pool_cost,
        pool_cost_rounded=pool_cost_rounded,
        reserved_baseline=baseline,
        teams=teams,
        platform=platform,
        sla_breaches=breaches,
        compensated_preemptions=compensated,
    )


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
    index: ScenarioIndex, share: Decimal, is_peak: Callable[[int], bool]
) -> _UsageTotals:
    """One pass over the usage, interval by interval (hot loop: plain dicts and Decimals)."""
    training = {task_id: task.is_training for task_id, task in index.tasks.items()}
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
        if record.request_count < book.sla_min_requests:
            continue
        if not exceeds_objective(record.buckets, service.slo_p99_ms):
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
    for breach in breaches:
        if not breach.penalized:
            continue
        rows = index.usage[breach.interval]
        held = sorted(
            (task, alloc)
            for task, alloc in rows.items()
            if alloc > ZERO and index.tasks[task].is_training
        )
        amount_left = penalty
        for position, (task, alloc) in enumerate(held):
            last = position == len(held) - 1
            amount = amount_left if last else scaled(penalty, alloc, breach.training_gpu_seconds)
            amount_left -= amount
            _post(totals.penalty, task, amount, alloc)
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
    scenario: Scenario, rates: Rates, is_peak: Callable[[int], bool]
) -> tuple[CompensatedPreemption, ...]:
    """Rule 5: a training task's preemptions beyond the N-th, numbered in time order (ties
    by pod), earn lost * rate / 3600; lost is reported, else min(cap, seconds run) * GPUs,
    and the rate is R in a peak interval, R_off off-peak."""
    book, tasks = scenario.price_book, scenario.index.tasks
    by_task: dict[str, list[Preemption]] = {}
    for event in scenario.preemptions:
        if tasks[event.task].is_training:
            by_task.setdefault(event.task, []).append(event)
    credits = []
    for task in sorted(by_task):
        events = sorted(by_task[task], key=lambda event: (event.at, event.pod))
        for number, event in enumerate(events, start=1):
            if number > book.starvation_preemption_threshold:
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
    if reported:
        lost = event.lost_gpu_seconds
    else:
        # An exact product: the context traps any loss of digits.
        lost = min(book.starvation_lost_work_cap_seconds, event.seconds_since_start) * event.gpus
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
    )


def _ledgers(
    usage: _UsageTotals,
    rates: Rates,
    baseline: Decimal,
    sla: _SlaTotals,
    compensated: tuple[CompensatedPreemption, ...],
) -> dict[str, Ledger]:
    """Per line kind, what each task (or service) contributes: [unrounded amount, GPU-s]."""
    covered_total = sum(usage.covered.values(), ZERO)
    ledgers: dict[str, Ledger] = {
        "baseline": {
            task: [scaled(baseline, seconds, covered_total), seconds]
            for task, seconds in usage.covered.items()
            if seconds > ZERO
        },
        "standard": {
            task: [per_hour(seconds, rates.standard_per_gpu_hour), seconds]
            for task, seconds in usage.standard.items()
        },
        "offpeak": {
            task: [per_hour(seconds, rates.offpeak_training_per_gpu_hour), seconds]
            for task, seconds in usage.offpeak.items()
        },
        "sla_penalty": sla.penalty,
        "sla_credit": {service: [-amount, held] for service, (amount, held) in sla.credit.items()},
        "compensation": {},
    }
    for credit in compensated:
        _post(ledgers["compensation"], credit.task, -credit.amount, credit.lost_gpu_seconds)
    return ledgers


def _team_results(
    scenario: Scenario,
    ledgers: dict[str, Ledger],
    sla: _SlaTotals,
    rates: Rates,
    baseline: Decimal,
) -> tuple[TeamResult, ...]:
    """Every team that owns a task or a service, by name, with its non-empty lines."""
    index = scenario.index
    owners = {task_id: task.team for task_id, task in index.tasks.items()}
    service_owners = {service_id: service.team for service_id, service in index.services.items()}
    results = []
    for team in sorted(set(owners.values()) | set(service_owners.values())):
        context = wording.TeamContext(
            team=team,
            book=scenario.price_book,
            rates=rates,
            baseline=baseline,
            covered_gpu_seconds=sum((entry[1] for entry in ledgers["baseline"].values()), ZERO),
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
            if ids:
                lines.append(_team_line(kind, ids, ledgers[kind], sla, context))
        total = sum((line.rounded for line in lines), ZERO)
        results.append(TeamResult(team=team, lines=tuple(lines), total=total))
    return tuple(results)


def _team_line(
    kind: str,
    ids: list[str],
    ledger: Ledger,
    sla: _SlaTotals,
    context: wording.TeamContext,
) -> Line:
    """One team line: the exact sum of its contributions, rounded once."""
    contributions = tuple(
        Contribution(
            id=key,
            is_service=kind == "sla_credit",
            amount=ledger[key][0],
            gpu_seconds=ledger[key][1],
        )
        for key in ids
    )
    amount = sum((item.amount for item in contributions), ZERO)
    rounded = round_money(amount, context.book.currency)
    if kind in SLA_LINE_KINDS:
        intervals = _breached_intervals(kind, ids, amount, sla, context.book)
        return Line(
            kind=kind,
            amount=amount,
            rounded=rounded,
            description=wording.sla_line(kind, context, ids, intervals, amount),
            breached_intervals=intervals,
            rate_per_interval=context.book.sla_penalty_per_interval,
            contributions=contributions,
        )
    gpu_seconds = sum((item.gpu_seconds for item in contributions), ZERO)
    rate = _line_rate(kind, context.rates, amount, gpu_seconds)
    return Line(
        kind=kind,
        amount=amount,
        rounded=rounded,
        description=wording.team_line(kind, context, gpu_seconds, rate, amount),
        gpu_seconds=gpu_seconds,
        rate_per_gpu_hour=rate,
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


def _line_rate(kind: str, rates: Rates, amount: Decimal, gpu_seconds: Decimal) -> Decimal:
    """The book rate of the line, or for baseline and compensation the effective rate."""
    if kind == "standard":
        return rates.standard_per_gpu_hour
    if kind == "offpeak":
        return rates.offpeak_training_per_gpu_hour
    if gpu_seconds == ZERO:
        return ZERO
    return scaled(abs(amount), SECONDS_PER_HOUR, gpu_seconds)


def _platform(
    book: PriceBook,
    rates: Rates,
    usage: _UsageTotals,
    baseline: Decimal,
    compensated: tuple[CompensatedPreemption, ...],
    pool_cost_rounded: Decimal,
    teams: tuple[TeamResult, ...],
) -> PlatformResult:
    """Rule 6: the balance `round(C) - Σ team totals` and its named lines."""
    standard = rates.standard_per_gpu_hour
    discount = standard - rates.offpeak_training_per_gpu_hour
    lost = sum((credit.lost_gpu_seconds for credit in compensated), ZERO)
    unassigned = baseline if sum(usage.covered.values(), ZERO) == ZERO else ZERO
    figures = (  # name, GPU-seconds, rate per GPU-hour, unrounded amount
        ("idle_capacity", usage.idle, standard, per_hour(usage.idle, standard)),
        ("reserve_resold", usage.resold, standard, -per_hour(usage.resold, standard)),
        (
            "offpeak_discount",
            usage.offpeak_training,
            discount,
            per_hour(usage.offpeak_training, discount),
        ),
        (
            "starvation_compensation",
            lost,
            None,
            sum((credit.amount for credit in compensated), ZERO),
        ),
        ("unassigned_reservation", None, None, unassigned),
    )
    balance = pool_cost_rounded - sum((team.total for team in teams), ZERO)
    lines = []
    for name, gpu_seconds, rate, amount in figures:
        lines.append(
            Line(
                kind=name,
                amount=amount,
                rounded=round_money(amount, book.currency),
                description=wording.platform_line(name, book, rates, gpu_seconds, amount),
                gpu_seconds=gpu_seconds,
                rate_per_gpu_hour=rate,
            )
        )
    rounding = balance - sum((line.rounded for line in lines), ZERO)
    lines.append(
        Line(
            kind="rounding",
            amount=rounding,
            rounded=rounding,
            description=wording.platform_line("rounding", book, rates, None, rounding),
        )
    )
    return PlatformResult(lines=tuple(lines), total=balance)
