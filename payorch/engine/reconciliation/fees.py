"""The fees reconciliation observed, read for the pages that show them (docs/reconciliation.md,
"Observed fees"). A completed run keeps them (`storage.observed_fees`, in the transaction that
completes it); routing reads them with its success rates (`engine.routing.sessions`), and weighs
them as `engine.routing.observed_fees` says."""

from __future__ import annotations

import uuid
from datetime import UTC, date, timedelta

from payorch.engine.context import Context
from payorch.engine.routing.observed_fees import ObservedFee, ObservedFees
from payorch.storage import observed_fees


def fee_window_start(context: Context) -> date:
    """The first settled day whose fees count: the window is the last
    `reconciliation.fee_window_days` UTC days, today included."""
    days = context.settings.reconciliation.fee_window_days
    return context.clock.now().astimezone(UTC).date() - timedelta(days=days - 1)


async def observed_fees_now(context: Context, application_id: uuid.UUID) -> ObservedFees:
    """The application's observed fees over the window, as routing weighs them."""
    rows = await context.db.autocommit(
        observed_fees.observed_fee_sums, application_id, fee_window_start(context)
    )
    return ObservedFees(ObservedFee(*row) for row in rows)
