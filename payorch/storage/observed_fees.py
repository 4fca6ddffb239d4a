"""Fees reconciliation observed (migration 0032; docs/reconciliation.md, "Observed fees"): per
application, provider, payment method, currency and settled day, the payments a run MATCHED, their
gross and the fees the provider kept for them. A completed run replaces its period's days
(`record_run_fees`, in the transaction that completes it), so the newest run over a day tells it
and two runs over one day never count it twice. `observed_fee_sums` answers the sums over a
window, which `net` routing (`engine.routing.observed_fees`) and the console's routing page read.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import NamedTuple

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.reconciliation import ItemOutcome

# The settled kind of a payment, as `reconciliation_items.kind` stores it (`SettledKind.PAYMENT`).
_PAYMENT = "PAYMENT"


class FeeSums(NamedTuple):
    """A provider's matched payments in one payment method and currency over a window: how many,
    their gross and the fees kept for them, in minor units."""

    provider: str
    payment_method: str
    currency: str
    payments: int
    gross_minor: int
    fee_minor: int


@on_database_thread
async def record_run_fees(
    conn: Connection, run_id: uuid.UUID, application_id: uuid.UUID, provider: str, first: date, last: date
) -> None:
    """Replace the application's observed fees at `provider` on the days `first` to `last` with the
    run's: its MATCHED payments with a payment method and a positive gross, summed per day, method
    and currency."""
    await conn.execute(
        """DELETE FROM observed_fees
           WHERE application_id = $1 AND provider = $2 AND settled_on BETWEEN $3 AND $4""",
        application_id,
        provider,
        first,
        last,
    )
    await conn.execute(
        f"""INSERT INTO observed_fees (application_id, provider, payment_method, currency, settled_on,
                                       payments, gross_minor, fee_minor)
            SELECT $1, $2, method, currency, settled_on, count(*), sum(gross_minor), sum(fee_minor)
            FROM reconciliation_items
            WHERE run_id = $5 AND outcome = '{ItemOutcome.MATCHED}' AND kind = '{_PAYMENT}'
              AND method IS NOT NULL AND gross_minor > 0 AND fee_minor IS NOT NULL
              AND settled_on BETWEEN $3 AND $4
            GROUP BY method, currency, settled_on""",
        application_id,
        provider,
        first,
        last,
        run_id,
    )


@on_database_thread
async def observed_fee_sums(conn: Connection, application_id: uuid.UUID, since: date) -> list[FeeSums]:
    """The application's observed fees settled on `since` or later, summed per provider, payment
    method and currency, in that order."""
    rows = await conn.fetch(
        """SELECT provider, payment_method, currency, sum(payments)::bigint AS payments,
                  sum(gross_minor)::bigint AS gross, sum(fee_minor)::bigint AS fee
           FROM observed_fees WHERE application_id = $1 AND settled_on >= $2
           GROUP BY provider, payment_method, currency
           ORDER BY provider, payment_method, currency""",
        application_id,
        since,
    )
    return [
        FeeSums(row["provider"], row["payment_method"], row["currency"].strip(), *row[3:]) for row in rows
    ]
