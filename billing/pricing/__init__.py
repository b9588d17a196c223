"""The pricing engine: docs/pricing.md version 2, to the cent, in plain Python.

Design
------
- **Pure.** Standard library only: no Django, no database, no clock, no network. The same
  scenario gives the same result on any machine at any time.
- **Input** is a `Scenario` of frozen dataclasses (`scenario_from_dict` reads the JSON of
  docs/pricing.md "Scenario files"). A Scenario validates itself when built and groups usage by
  interval once; usage rows stay plain `(interval, task, alloc)` tuples because a month of a
  1,000-GPU pool has millions of them.
- **Arithmetic** is `Decimal` only (a float raises TypeError) in a pinned context of 60
  digits that traps any inexact sum. Every division is rounded once onto a fixed grid of 30
  decimal places (`money.scaled`), so every sum is exact and the result does not depend on
  the order of the records. One rounding rule, `ROUNDING = ROUND_HALF_UP`, for those
  divisions and for the final rounding of each team line to the currency's minor unit.
- **GPU classes** (version 2): a book may list classes, each with its own D, F, W and
  optional s; the book's own figures are the class `default`. Capacity, usage and preemption
  records name their class (absent: `default`). Each class is priced as a sub-pool (rules 1,
  2, 3, 5, 6), SLA penalties over all classes (rule 4), and a team line is the exact sum of
  its per-class amounts, rounded once. A task's `preemptions_before` numbers its preemptions
  from its first ever. A book without classes prices exactly as version 1, and its scenario
  keeps its canonical text and hash (version-2 fields are written only when not default).
- **Output** is a `PricingResult`: per team its lines (baseline, standard, off-peak, SLA
  penalty, SLA credit, compensation) each with quantity, rate, unrounded and rounded amount,
  a plain-English description and the per-task contributions; the platform balance and its
  named lines; the SLA breaches; the rates and their derivation. `result_to_dict` gives the
  JSON of docs/pricing.md; `scenario_hash` pins a statement to its exact input.

Modules: `model` (input), `engine` (rules), `result` (output), `output` (JSON), `parsing`
(scenario files, canonical JSON), `money` (context, fixed-point arithmetic), `times`,
`wording` (descriptions). The rules the engine shares with the rest of Tandem (the rounding
rule, task kinds, the price book's fields, Prometheus' histogram_quantile and the breach
test, lost work) live in the Django-free `kernel/` package (docs/architecture.md "Kernel").
"""

from billing.pricing.engine import ENGINE_VERSION, derive_class_rates, derive_rates, price
from billing.pricing.model import (
    CLASS_DECIMAL_FIELDS,
    DECIMAL_BOOK_FIELDS,
    DEFAULT_CLASS,
    TASK_KINDS,
    TRAINING_KINDS,
    Capacity,
    GpuClass,
    Latency,
    Preemption,
    PriceBook,
    Scenario,
    ScenarioError,
    Service,
    Task,
    Usage,
    UsageRuns,
)
from billing.pricing.money import CONTEXT, ROUNDING
from billing.pricing.output import result_to_dict
from billing.pricing.parsing import (
    canonical_json,
    canonical_json_parts,
    scenario_from_dict,
    scenario_hash,
    scenario_to_dict,
)
from billing.pricing.result import (
    PLATFORM_LINE_NAMES,
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
from billing.pricing.times import format_interval, parse_instant
from kernel.histogram import histogram_quantile

__all__ = [
    "CLASS_DECIMAL_FIELDS",
    "CONTEXT",
    "DECIMAL_BOOK_FIELDS",
    "DEFAULT_CLASS",
    "ENGINE_VERSION",
    "PLATFORM_LINE_NAMES",
    "ROUNDING",
    "TASK_KINDS",
    "TEAM_LINE_KINDS",
    "TRAINING_KINDS",
    "Breach",
    "Capacity",
    "ClassPart",
    "CompensatedPreemption",
    "Contribution",
    "GpuClass",
    "Latency",
    "Line",
    "PlatformResult",
    "Preemption",
    "PriceBook",
    "PricingResult",
    "Rates",
    "Scenario",
    "ScenarioError",
    "Service",
    "Task",
    "TeamResult",
    "Usage",
    "UsageRuns",
    "canonical_json",
    "canonical_json_parts",
    "derive_class_rates",
    "derive_rates",
    "format_interval",
    "histogram_quantile",
    "parse_instant",
    "price",
    "result_to_dict",
    "scenario_from_dict",
    "scenario_hash",
    "scenario_to_dict",
]
