"""Archiving a closed month: its metering partitions moved out of the database into
checksummed files (`metering.partitions`), after checking the month still verifies.
`verify_period --archive` re-prices it from them (docs/architecture.md "Archiving a month").
"""

from __future__ import annotations

from pathlib import Path

from audit.services import audit_record
from billing.selectors import period_close_of, period_verification
from billing.services.books import BillingError
from metering import partitions


def period_archive(*, period: str, directory: Path) -> Path:
    """Archive a closed month's metering partitions to `directory`/YYYY-MM and drop them
    (metering.partitions.month_archive); returns the manifest's path.

    Refuses (PeriodNotClosed) a month that is not closed, and (BillingError) one whose
    metering no longer matches what was priced: corrections of it are still to come, and
    they re-price it from the metering tables. `verify_period --archive` re-prices it later.
    """
    close = period_close_of(period)
    month = partitions.month_of(period)
    partitions.archive_folder_free(month=month, directory=directory)
    verification = period_verification(period)
    if not verification.ok:
        raise BillingError(
            f"{period} does not verify, so it is not archived: "
            + "; ".join(verification.differences)
        )
    manifest = partitions.month_archive(month=month, directory=directory)
    audit_record(action="change", obj=close, changes={"archived_to": [None, str(manifest)]})
    return manifest
