"""Decimal arithmetic for the engine: one rounding rule, exact sums, fixed-point divisions.

Every amount and quantity the engine accumulates is a fixed-point number with
`FIXED_PLACES` decimal places. Sums of such numbers are exact (the context traps `Inexact`),
so a result cannot depend on the order in which records arrive. The only places where digits
are dropped are the divisions below (and the final rounding to the currency's minor unit),
each rounded with the single rule `ROUNDING`.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Context, Decimal, DivisionByZero, Inexact, InvalidOperation, Overflow
from itertools import repeat

from kernel.money import (
    FIXED_PLACES,
    FIXED_QUANTUM,
    ROUNDING,
    format_money,
    minor_unit,
    round_money,
    round_places,
)

PRECISION = 60
ZERO = Decimal(0)
SECONDS_PER_HOUR = Decimal(3600)

# The engine's context: 60 significant digits, and any silent loss of digits is an error,
# because sums must be exact for the result to be order-independent.
CONTEXT = Context(
    prec=PRECISION,
    rounding=ROUNDING,
    traps=[InvalidOperation, DivisionByZero, Overflow, Inexact],
)
# Products and quotients are formed here (wide enough that a product of two engine numbers
# is exact) and then rounded once onto the fixed-point grid.
_WIDE = Context(prec=2 * PRECISION, rounding=ROUNDING, traps=[InvalidOperation, DivisionByZero])


def scaled(value: Decimal, factor: Decimal, divisor: Decimal = Decimal(1)) -> Decimal:
    """`value * factor / divisor`, rounded once (ROUNDING) to `FIXED_PLACES` places."""
    product = _WIDE.multiply(value, factor)
    return _WIDE.divide(product, divisor).quantize(FIXED_QUANTUM, context=_WIDE)


def scaled_each(value: Decimal, factors: Iterable[Decimal], divisor: Decimal) -> list[Decimal]:
    """`scaled(value, factor, divisor)` for each of `factors`, in order: the same products,
    quotients and rounding, run by `map` without a Python call per factor (rule 4 splits
    each penalty over every training task of its interval)."""
    products = map(_WIDE.multiply, repeat(value), factors)
    quotients = map(_WIDE.divide, products, repeat(divisor))
    grid = repeat(FIXED_QUANTUM)
    return list(map(Decimal.quantize, quotients, grid, repeat(None), repeat(_WIDE)))


def per_hour(gpu_seconds: Decimal, rate_per_gpu_hour: Decimal) -> Decimal:
    """The amount for `gpu_seconds` at a rate per GPU-hour (fixed-point, unrounded)."""
    return scaled(gpu_seconds, rate_per_gpu_hour, SECONDS_PER_HOUR)


def hours(gpu_seconds: Decimal) -> Decimal:
    """GPU-seconds as GPU-hours rounded to 2 places (for display)."""
    return round_places(_WIDE.divide(gpu_seconds, SECONDS_PER_HOUR), 2)


def canonical_decimal(value: Decimal) -> str:
    """A decimal as scenario files write it: its exact text, trailing zeros kept.

    `"11.50"` stays `"11.50"`: the book's written precision is how the rates print
    (`14.3740`), so a scenario written back out re-prices to the same text.
    """
    return str(value)


__all__ = [
    "CONTEXT",
    "FIXED_PLACES",
    "FIXED_QUANTUM",
    "PRECISION",
    "ROUNDING",
    "SECONDS_PER_HOUR",
    "ZERO",
    "canonical_decimal",
    "format_money",
    "hours",
    "minor_unit",
    "per_hour",
    "round_money",
    "round_places",
    "scaled",
    "scaled_each",
]
