"""The default price book (version 1): the example values of docs/pricing.md.

Kept in a module of its own, free of models, because the data migration that creates the
book on a fresh database and the service `price_book_ensure_default` both read it.
"""

from __future__ import annotations

import datetime as dt

# A date before any metered data, so the default book is in force for every period.
DEFAULT_EFFECTIVE_FROM = dt.date(2000, 1, 1)

DEFAULT_PRICE_BOOK = {
    "currency": "CNY",
    "depreciation_per_gpu_hour": "11.50",
    "facility_per_gpu_hour": "2.30",
    "electricity_per_kwh": "0.82",
    "gpu_average_power_kw": "0.70",
    "reserved_inference_share": "0.30",
    "peak_hours": [9, 22],
    "sla_penalty_per_interval": "20.00",
    "sla_min_requests": 100,
    "starvation_preemption_threshold": 3,
    "starvation_lost_work_cap_seconds": 1800,
}
