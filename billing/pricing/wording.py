"""Plain-English descriptions of lines, for finance readers of a statement.

Figures in the text are rounded for reading (GPU-hours to 2 places, money to the minor unit);
the exact figures sit beside the text in the line itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from billing.pricing.model import PriceBook
from billing.pricing.money import ZERO, format_money, hours, round_money, round_places, scaled
from billing.pricing.result import DEFAULT_CLASS, ClassPart


@dataclass(frozen=True, slots=True)
class TeamContext:
    team: str
    book: PriceBook
    baseline: Decimal
    covered_gpu_seconds: Decimal  # Σ c(t,i) over all inference tasks
    class_shares: dict[str, Decimal]  # reserve share s_c per class of the book


def _money(amount: Decimal, book: PriceBook) -> str:
    return f"{format_money(round_money(amount, book.currency), book.currency)} {book.currency}"


def _peak(book: PriceBook) -> str:
    start, end = book.peak_hours
    return f"{start:02d}:00 to {end:02d}:00 {book.timezone} time"


def _percent(part: Decimal, whole: Decimal) -> str:
    if whole == ZERO:
        return "0%"
    return f"{round_places(scaled(part, Decimal(100), whole), 2)}%"


def rate_derivation(
    book: PriceBook,
    gpu_class: str,
    depreciation: Decimal,
    facility: Decimal,
    power: Decimal,
    standard: Decimal,
    offpeak: Decimal,
) -> str:
    """How a class's two rates follow from the price book (`default`: the book's own)."""
    electricity = book.electricity_per_kwh
    unit = f"{book.currency} per GPU-hour"
    text = (
        f"Standard rate R = depreciation {depreciation} + facility {facility} + electricity "
        f"{electricity} per kWh times {power} kW per GPU = {standard} {unit}. Off-peak training "
        f"rate R_off = depreciation {depreciation} + electricity {electricity} times {power} = "
        f"{offpeak} {unit} (no facility share)."
    )
    return text if gpu_class == DEFAULT_CLASS else f"GPU class {gpu_class}: {text}"


def _by_class(parts: tuple[ClassPart, ...], book: PriceBook) -> str:
    """ " By GPU class (...): H100 8.43 GPU-hours at 42.6740, default 3.74 GPU-hours at
    14.3740."; nothing for a book without classes (it reads as in version 1)."""
    if not book.gpu_classes or not parts:
        return ""
    texts = []
    for part in parts:
        rate = "" if part.rate_per_gpu_hour is None else f" at {part.rate_per_gpu_hour}"
        texts.append(f"{part.gpu_class} {part.gpu_hours} GPU-hours{rate}")
    return f" By GPU class ({book.currency} per GPU-hour): {', '.join(texts)}."


def _rate(rate: Decimal | None) -> str:
    """A book rate as written (at most 12 places: D + F + E*W of 6-place figures); an
    average over classes (the engine's 30-place grid) to 4 places."""
    if rate is None or rate.as_tuple().exponent >= -12:
        return str(rate)
    return f"an average of {round_places(rate, 4)}"


def _reserve_share(context: TeamContext) -> str:
    shares = context.class_shares
    if len(shares) == 1:
        return f"{round_places(next(iter(shares.values())) * 100, 2)}% of the pool is"
    each = ", ".join(f"{name} {round_places(share * 100, 2)}%" for name, share in shares.items())
    return f"a share of each GPU class ({each}) is"


def team_line(
    kind: str,
    context: TeamContext,
    gpu_seconds: Decimal,
    rate: Decimal,
    amount: Decimal,
    by_class: tuple[ClassPart, ...] = (),
) -> str:
    """Baseline, standard, off-peak and compensation lines."""
    book = context.book
    used = f"{hours(gpu_seconds)} GPU-hours"
    classes = _by_class(by_class, book)
    if kind == "baseline":
        return (
            f"Reserved inference capacity: {_reserve_share(context)} held ready for inference, "
            f"costing {_money(context.baseline, book)} in the period. Your services used "
            f"{used} of that reserve, {_percent(gpu_seconds, context.covered_gpu_seconds)} "
            f"of all reserve use, so you carry that share of its cost.{classes}"
        )
    if kind == "standard":
        return (
            f"GPU time at the standard rate: {used} at {_rate(rate)} {book.currency} per GPU-hour "
            f"(inference beyond the reserve, and training during peak hours, {_peak(book)})."
            f"{classes}"
        )
    if kind == "offpeak":
        return (
            f"Training GPU time outside peak hours ({_peak(book)}) at the off-peak training "
            f"rate: {used} at {_rate(rate)} {book.currency} per GPU-hour (depreciation and "
            f"electricity only).{classes}"
        )
    threshold = book.starvation_preemption_threshold
    return (
        f"Credit for preempted training: each preemption of a task beyond its first "
        f"{threshold} is compensated for the work it lost ({used} in all), at the rate of the "
        f"hour it happened: {_money(-amount, book)} credited.{classes}"
    )


def sla_line(
    kind: str, context: TeamContext, ids: list[str], intervals: Decimal, amount: Decimal
) -> str:
    """Latency objective penalty and credit lines."""
    book = context.book
    each = _money(book.sla_penalty_per_interval, book)
    if kind == "sla_penalty":
        return (
            "Latency penalty: an inference service missed its P99 latency objective in peak "
            "intervals while your training held GPUs. Each such interval costs "
            f"{each}, shared among training teams by the GPUs they held; your share comes to "
            f"{round_places(intervals, 2)} intervals ({', '.join(ids)})."
        )
    return (
        f"Latency credit: your service {', '.join(ids)} missed its P99 latency objective in "
        f"{round_places(intervals, 0)} peak intervals while training shared the pool; "
        f"{each} is credited for each ({_money(-amount, book)} in all)."
    )


def platform_line(
    name: str,
    book: PriceBook,
    rate: Decimal | None,
    gpu_seconds: Decimal | None,
    amount: Decimal,
    by_class: tuple[ClassPart, ...] = (),
) -> str:
    """The named lines of the platform balance; `rate` is the line's rate per GPU-hour (for
    the off-peak discount, R - R_off)."""
    used = "" if gpu_seconds is None else f"{hours(gpu_seconds)} GPU-hours"
    if name == "unassigned_reservation" and amount and book.gpu_classes:
        names = ", ".join(part.gpu_class for part in by_class)
        return (
            f"Unassigned reservation: no inference used the reserve of GPU class {names} in "
            f"the period, so that reserved capacity ({_money(amount, book)}) was charged to "
            "nobody."
        )
    return _platform_text(name, book, rate, used, amount) + _by_class(by_class, book)


def _platform_text(
    name: str, book: PriceBook, rate: Decimal | None, used: str, amount: Decimal
) -> str:
    texts = {
        "idle_capacity": (
            f"Idle capacity: {used} of shared (not reserved) capacity that nobody used, at the "
            f"standard rate {_rate(rate)}; the platform carries this cost."
        ),
        "reserve_resold": (
            f"Reserve resold: {used} of usage ran on capacity reserved for inference. Teams "
            "already paid for it in their usage lines, so it reduces the platform's cost."
        ),
        "offpeak_discount": (
            f"Off-peak discount: {used} of training ran outside peak hours ({_peak(book)}) "
            f"and was billed {_rate(rate)} {book.currency} per GPU-hour below the standard "
            "rate; the platform carries it."
        ),
        "starvation_compensation": (
            f"Starvation compensation: credits paid to teams for {used} of training work lost "
            f"to repeated preemptions ({_money(amount, book)}); the platform funds them."
        ),
        "unassigned_reservation": (
            "Unassigned reservation: no inference ran in the period, so the capacity reserved "
            f"for inference ({_money(amount, book)}) was charged to nobody."
            if amount
            else "Unassigned reservation: none; inference ran, so the reserved capacity was "
            "charged to the inference teams."
        ),
        "rounding": (
            "Rounding: the cents left when each team line is rounded to the cent "
            "(half up), so that the platform lines add up exactly to the pool cost not billed "
            "to teams."
        ),
    }
    return texts[name]
