"""The fields of a price book and of its GPU classes (docs/pricing.md "Price book", "GPU
classes"), named once for the database, the API, the admin, scenario files and the engine.

Where they used to disagree: the engine and scenario files read
`starvation_lost_work_cap_seconds` as a decimal (scenario files carry `1800` or `"1800"`, and
it is multiplied by fractional GPU counts), while the book's table, its API and the draft
service hold it as whole seconds. Both are true of the same number: the book stores whole
seconds, and the engine accepts that whole number as a Decimal; the lists below say which
list each reader uses. The default book (billing/defaults.py) leaves out `timezone`, which
comes from `TANDEM_TIMEZONE` when the book is created.
"""

from __future__ import annotations

# Rates and shares, decimal amounts written as decimal text (never floats).
PRICE_BOOK_DECIMAL_FIELDS: tuple[str, ...] = (
    "depreciation_per_gpu_hour",
    "facility_per_gpu_hour",
    "electricity_per_kwh",
    "gpu_average_power_kw",
    "reserved_inference_share",
    "sla_penalty_per_interval",
)
# Whole numbers in the book's table.
PRICE_BOOK_WHOLE_FIELDS: tuple[str, ...] = (
    "sla_min_requests",
    "starvation_preemption_threshold",
    "starvation_lost_work_cap_seconds",
)
# Every field of a book, in the order docs/pricing.md lists them.
PRICE_BOOK_FIELDS: tuple[str, ...] = (
    "currency",
    "timezone",
    *PRICE_BOOK_DECIMAL_FIELDS[:5],
    "peak_hours",
    "sla_penalty_per_interval",
    "sla_min_requests",
    "starvation_preemption_threshold",
    "starvation_lost_work_cap_seconds",
)
# The fields the engine reads as Decimals: the book's decimals and the lost-work cap.
ENGINE_DECIMAL_FIELDS: tuple[str, ...] = (
    *PRICE_BOOK_DECIMAL_FIELDS,
    "starvation_lost_work_cap_seconds",
)

# A GPU class: its name, the GPU models it takes, its own D, F and W, and optionally s.
GPU_CLASS_DECIMAL_FIELDS: tuple[str, ...] = (
    "depreciation_per_gpu_hour",
    "facility_per_gpu_hour",
    "gpu_average_power_kw",
)
GPU_CLASS_OPTIONAL_FIELDS: tuple[str, ...] = ("reserved_inference_share",)
GPU_CLASS_FIELDS: tuple[str, ...] = (
    "name",
    "models",
    *GPU_CLASS_DECIMAL_FIELDS,
    *GPU_CLASS_OPTIONAL_FIELDS,
)
