"""The provider's id of a paid payment, where it is not its checkout's id (migration 0028): Stripe's
PaymentIntent `pi_...` behind a Checkout Session `cs_...`. Reconciliation matches the provider's
settled items by it; nothing else reads it.
"""

from __future__ import annotations

import uuid

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread

# The session's row holds its open attempt's checkout, `payment_attempts` its ended ones'.
_RECORD = (
    """UPDATE checkout_sessions SET provider_payment_reference = $4
       WHERE provider_name = $2 AND provider_reference = $3 AND application_id = $1""",
    """UPDATE payment_attempts SET provider_payment_reference = $4
       WHERE provider_name = $2 AND provider_reference = $3 AND application_id = $1""",
)


@on_database_thread
async def record_payment_reference(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    checkout_reference: str,
    payment_reference: str,
) -> None:
    """Keep `payment_reference` on the session (or ended attempt) of the application whose checkout
    at `provider` is `checkout_reference`; nothing when there is none. Recording it again is
    harmless: it is the same payment."""
    for statement in _RECORD:
        await conn.execute(statement, application_id, provider, checkout_reference, payment_reference)
