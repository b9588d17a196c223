"""Writes for billing, by concern: price books (`books`), period closes (`close`), quotas and
the month-to-date draft (`quotas`), archiving a closed month (`archive`). Callers import from
`billing.services`; the modules import each other downwards only: quotas -> close -> books,
archive -> books.
"""

from billing.services.archive import period_archive
from billing.services.books import (
    CLASS_DECIMAL_FIELDS,
    PERIOD_CLOSE_LOCK,
    BillingError,
    PriceBookInvalid,
    price_book_create_draft,
    price_book_ensure_default,
    price_book_publish,
    price_book_set_gpu_classes,
    price_book_validate_gpu_classes,
)
from billing.services.close import (
    PeriodCloseOutcome,
    PeriodCloseRefused,
    period_close,
    period_close_due,
)
from billing.services.quotas import (
    MONTH_TO_DATE_LOCK,
    month_to_date_draft_refresh,
    quota_set,
)

__all__ = [
    "CLASS_DECIMAL_FIELDS",
    "MONTH_TO_DATE_LOCK",
    "PERIOD_CLOSE_LOCK",
    "BillingError",
    "PeriodCloseOutcome",
    "PeriodCloseRefused",
    "PriceBookInvalid",
    "month_to_date_draft_refresh",
    "period_archive",
    "period_close",
    "period_close_due",
    "price_book_create_draft",
    "price_book_ensure_default",
    "price_book_publish",
    "price_book_set_gpu_classes",
    "price_book_validate_gpu_classes",
    "quota_set",
]
