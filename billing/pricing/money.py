"""Decimal arithmetic for the engine: one rounding rule, exact sums, fixed-point divisions.

Every amount and quantity the engine accumulates is a fixed-point number with
`FIXED_PLACES` decimal places. Sums of such numbers are exact (the context traps `Inexact`),
so a result cannot depend on the order in which records arrive. The only places where digits
are dropped are the divisions below (and the final rounding to the currency's minor unit),
each rounded with the single rule `ROUNDING`.
"""

from __future__ import annotations

from decimal import (
    ROUND_HALF_UP,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
)

ROUNDING = ROUND_HALF_UP
PRECISION = 60
FIXED_PLACES = 30
FIXED_QUANTUM = Decimal(1).scaleb(-FIXED_PLACES)
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

# ISO 4217 currencies whose minor unit is not the cent; every other code rounds to 2 places.
_MINOR_UNITS = {
    **dict.fromkeys(
        "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split(), 0
    ),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
    **dict.fromkeys("CLF UYW".split(), 4),
}


def scaled(value: Decimal, factor: Decimal, divisor: Decimal = Decimal(1)) -> Decimal:
    """`value * factor / divisor`, rounded once (ROUNDING) to `FIXED_PLACES` places."""
    product = _WIDE.multiply(value, factor)
    return _WIDE.divide(product, divisor).quantize(FIXED_QUANTUM, context=_WIDE)


def per_hour(gpu_seconds: Decimal, rate_per_gpu_hour: Decimal) -> Decimal:
    """The amount for `gpu_seconds` at a rate per GPU-hour (fixed-point, unrounded)."""
    return scaled(gpu_seconds, rate_per_gpu_hour, SECONDS_PER_HOUR)


def minor_unit(currency: str) -> int:
    """Decimal places of the currency's minor unit (2 unless ISO 4217 says otherwise)."""
    return _MINOR_UNITS.get(currency, 2)


def round_money(amount: Decimal, currency: str) -> Decimal:
    """Round once to the currency's minor unit with ROUNDING; never shows a negative zero."""
    rounded = amount.quantize(Decimal(1).scaleb(-minor_unit(currency)), context=_WIDE)
    return rounded.copy_abs() if rounded.is_zero() else rounded


def round_places(value: Decimal, places: int) -> Decimal:
    """Round `value` to `places` decimal places with ROUNDING (for display quantities)."""
    rounded = value.quantize(Decimal(1).scaleb(-places), context=_WIDE)
    return rounded.copy_abs() if rounded.is_zero() else rounded


def format_money(amount: Decimal, currency: str) -> str:
    """A rounded amount as text: two decimals (more for 3- and 4-place currencies)."""
    return str(round_places(amount, max(2, minor_unit(currency))))


def hours(gpu_seconds: Decimal) -> Decimal:
    """GPU-seconds as GPU-hours rounded to 2 places (for display)."""
    return round_places(_WIDE.divide(gpu_seconds, SECONDS_PER_HOUR), 2)


def canonical_decimal(value: Decimal) -> str:
    """A decimal as scenario files write it: its exact text, trailing zeros kept.

    `"11.50"` stays `"11.50"`: the book's written precision is how the rates print
    (`14.3740`), so a scenario written back out re-prices to the same text.
    """
    return str(value)
