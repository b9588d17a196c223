"""Prometheus' arithmetic on sample values as it writes them (texts: "4096", "0.9", "NaN",
"+Inf"), done exactly in Decimal: the range functions and aggregations Tandem takes from raw
samples in Python (measure's device meter, metering.shared_split) answer what Prometheus
would."""

from __future__ import annotations

from decimal import Decimal


def max_text(texts: list[str]) -> str:
    """The largest of the samples as Prometheus' `max` picks it: NaN gives way to any value.
    Compared as Decimals (exact, as every sample Tandem keeps; "+Inf" and "NaN" read too)."""
    first = texts[0]
    if texts.count(first) == len(texts):  # one text, or the same one at every tick
        return first
    best, best_value = first, Decimal(first)
    for text in texts[1:]:
        value = Decimal(text)
        if best_value.is_nan() or (not value.is_nan() and value > best_value):
            best, best_value = text, value
    return best


def sum_text(texts: list[str]) -> str:
    if len(texts) == 1:
        return texts[0]
    try:
        return str(sum(Decimal(text) for text in texts))
    except (ArithmeticError, ValueError):  # +Inf + -Inf: as Prometheus, NaN
        return "NaN"


def mean_text(texts: list[str]) -> str:
    """avg_over_time of the samples: exact where they are numbers (Prometheus' float mean
    differs from it by far less than the half byte at which a mean in MiB rounds), NaN or an
    infinity as Prometheus writes them otherwise."""
    first = texts[0]
    if texts.count(first) == len(texts):
        return first  # most intervals: the same reading at every tick
    values = [Decimal(text) for text in texts]
    if all(value.is_finite() for value in values):
        return str(sum(values) / len(values))
    return special_text(values)


def special_text(values: list[Decimal]) -> str:
    """The mean or the sum of samples holding NaN or an infinity, as Prometheus writes it."""
    infinities = {value for value in values if value.is_infinite()}
    if any(value.is_nan() for value in values) or len(infinities) > 1:
        return "NaN"
    return "+Inf" if infinities.pop() > 0 else "-Inf"
