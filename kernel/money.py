"""Money and displayed quantities: one rounding rule, ROUND_HALF_UP (docs/pricing.md "Rounding").

Every place that rounds an amount, a rate or a displayed quantity uses `ROUNDING` (or one of
the functions below), so the pricing engine, the statements, the APIs and every page round
alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Context, Decimal, DivisionByZero, Inexact, InvalidOperation
from fractions import Fraction

ROUNDING = ROUND_HALF_UP
# Unrounded figures live on a fixed grid of 30 decimal places (docs/pricing.md "Rounding"):
# the engine rounds every division onto it, and the database keeps it to the digit.
FIXED_PLACES = 30
FIXED_QUANTUM = Decimal(1).scaleb(-FIXED_PLACES)
CENT = Decimal("0.01")

# Wide enough that rounding any engine figure (60 significant digits) loses nothing but the
# digits the rounding drops.
_ROUNDING_CONTEXT = Context(prec=120, rounding=ROUNDING, traps=[InvalidOperation, DivisionByZero])
# Sums of stored amounts: wide, and a lost digit is an error rather than a rounding.
_EXACT_SUM_CONTEXT = Context(prec=120, rounding=ROUNDING, traps=[InvalidOperation, Inexact])

# ISO 4217 currencies whose minor unit is not the cent; every other code rounds to 2 places.
_MINOR_UNITS = {
    **dict.fromkeys(
        "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split(), 0
    ),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
    **dict.fromkeys("CLF UYW".split(), 4),
}


def minor_unit(currency: str) -> int:
    """Decimal places of the currency's minor unit (2 unless ISO 4217 says otherwise)."""
    return _MINOR_UNITS.get(currency, 2)


def exact_total(values: Iterable[Decimal]) -> Decimal:
    """The values added with no digit lost (Decimal(0) for none). Stored unrounded amounts
    keep 30 decimal places, 33 digits for an amount in the hundreds: Python's default context
    (28 digits) rounds their sum, so it would not equal the line it adds up."""
    total = Decimal(0)
    for value in values:
        total = _EXACT_SUM_CONTEXT.add(total, value)
    return total


def money_quantum(currency: str) -> Decimal:
    """The smallest amount of the currency: 0.01 CNY, 1 JPY, 0.001 KWD (its minor unit)."""
    return Decimal(1).scaleb(-minor_unit(currency))


def round_money(amount: Decimal, currency: str) -> Decimal:
    """Round once to the currency's minor unit with ROUNDING; never shows a negative zero."""
    rounded = amount.quantize(money_quantum(currency), context=_ROUNDING_CONTEXT)
    return rounded.copy_abs() if rounded.is_zero() else rounded


def round_places(value: Decimal, places: int) -> Decimal:
    """Round `value` to `places` decimal places with ROUNDING (for display quantities)."""
    rounded = value.quantize(Decimal(1).scaleb(-places), context=_ROUNDING_CONTEXT)
    return rounded.copy_abs() if rounded.is_zero() else rounded


def format_money(amount: Decimal, currency: str) -> str:
    """A rounded amount as text: two decimals (more for 3- and 4-place currencies)."""
    return str(round_places(amount, max(2, minor_unit(currency))))


def half_up(value: Decimal, quantum: Decimal) -> Decimal:
    """`value` rounded to the exponent of `quantum` with ROUNDING, in the caller's context.

    Exactly `value.quantize(quantum, rounding=ROUND_HALF_UP)`: a negative zero stays one,
    unlike `round_places`, so figures that were rounded this way print as before.
    """
    return value.quantize(quantum, rounding=ROUNDING)


def half_up_rational_text(value: Fraction | int, places: int) -> str:
    """An exact rational rounded once to `places` decimals, half away from zero (`ROUNDING`
    on a rational), as plain text ("-1.500000"): integer arithmetic on numerator and
    denominator, what `half_up(Decimal(n) / Decimal(d), ...)` gives, at a fraction of its cost
    (ingest writes millions of these; docs/pricing.md "Rounding")."""
    numerator, denominator = value.numerator, value.denominator
    sign = "-" if numerator < 0 else ""
    scale = 10**places
    units, rest = divmod(abs(numerator) * scale, denominator)
    if 2 * rest >= denominator:
        units += 1
    whole, fraction = divmod(units, scale)
    if places == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{fraction:0{places}d}"
