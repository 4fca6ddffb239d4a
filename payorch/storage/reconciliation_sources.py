"""What payorch recorded, as a reconciliation run reads it (migration 0029), always of one
application: its sessions and refunds by the provider's references, a batch of them in one statement
(`recorded_payments`, `recorded_refunds`), and, for what the provider did not settle, in keyset
batches of the application's rows that no item of the run has matched yet (`unsettled_payments`,
`unsettled_refunds`): a run's memory follows a batch, not the period.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import AttemptStatus, RefundStatus, SessionStatus

_PAID = ", ".join(
    f"'{status}'"
    for status in (
        SessionStatus.SUCCEEDED,
        SessionStatus.PARTIALLY_REFUNDED,
        SessionStatus.REFUNDED,
        SessionStatus.REVERSED,
    )
)
_COMPLETED = f"'{RefundStatus.COMPLETED}'"
_ATTEMPT_PAID = f"'{AttemptStatus.SUCCEEDED}'"


@dataclass(frozen=True)
class RecordedPayment:
    """payorch's session behind a provider's payment reference (its own checkout or an attempt's)."""

    session_id: uuid.UUID
    amount_minor: int
    currency: str
    paid: bool  # the session is paid (for an ended attempt's checkout: that attempt was)
    created_at: datetime
    checkout_reference: str  # the checkout at the provider (the session's own, or the attempt's)


@dataclass(frozen=True)
class RecordedRefund:
    refund_id: uuid.UUID
    session_id: uuid.UUID
    amount_minor: int  # positive, as payorch stores it
    currency: str
    completed: bool
    created_at: datetime


@on_database_thread
async def recorded_payments(
    conn: Connection, application_id: uuid.UUID, provider: str, references: list[str]
) -> dict[str, RecordedPayment]:
    """The application's sessions by the provider's payment `references`: a session's own checkout
    (or the payment's own id) first, else an ended attempt's."""
    rows = await conn.fetch(
        f"""SELECT 0 AS rank, r.reference, s.id, s.amount_minor, s.currency, s.status IN ({_PAID}) AS paid,
                   s.created_at, s.provider_reference AS checkout
            FROM checkout_sessions s
            JOIN unnest($3::text[]) AS r (reference)
              ON r.reference IN (s.provider_reference, s.provider_payment_reference)
            WHERE s.application_id = $1 AND s.provider_name = $2
              AND (s.provider_reference = ANY($3::text[]) OR s.provider_payment_reference = ANY($3::text[]))
            UNION ALL
            SELECT 1, r.reference, s.id, s.amount_minor, s.currency, a.status = {_ATTEMPT_PAID}, s.created_at,
                   a.provider_reference
            FROM payment_attempts a
            JOIN checkout_sessions s ON s.id = a.session_id
            JOIN unnest($3::text[]) AS r (reference)
              ON r.reference IN (a.provider_reference, a.provider_payment_reference)
            WHERE a.application_id = $1 AND a.provider_name = $2
              AND (a.provider_reference = ANY($3::text[]) OR a.provider_payment_reference = ANY($3::text[]))
            ORDER BY rank DESC""",
        application_id,
        provider,
        references,
    )
    found: dict[str, RecordedPayment] = {}
    for row in rows:  # rank descending: a session's own checkout overrides an attempt's
        found[row["reference"]] = RecordedPayment(
            row["id"],
            row["amount_minor"],
            row["currency"].strip(),
            row["paid"],
            row["created_at"],
            row["checkout"],
        )
    return found


@on_database_thread
async def recorded_refunds(
    conn: Connection, application_id: uuid.UUID, provider: str, references: list[str]
) -> dict[str, RecordedRefund]:
    """The application's refunds at `provider` by the provider's refund `references`."""
    rows = await conn.fetch(
        f"""SELECT provider_reference, id, session_id, amount_minor, currency,
                   status = {_COMPLETED} AS completed, created_at
            FROM refunds
            WHERE application_id = $1 AND provider_name = $2 AND provider_reference = ANY($3::text[])""",
        application_id,
        provider,
        references,
    )
    return {
        row["provider_reference"]: RecordedRefund(
            row["id"],
            row["session_id"],
            row["amount_minor"],
            row["currency"].strip(),
            row["completed"],
            row["created_at"],
        )
        for row in rows
    }


@on_database_thread
async def unsettled_payments(
    conn: Connection,
    run_id: uuid.UUID,
    application_id: uuid.UUID,
    provider: str,
    since: datetime,
    until: datetime,
    after: tuple[datetime, uuid.UUID] | None,
    batch: int,
) -> list[RecordedPayment]:
    """Up to `batch` of the application's paid sessions at `provider` created in [`since`, `until`)
    that no item of the run matched, in (created_at, id) order after `after`."""
    after_at, after_id = after if after is not None else (since, uuid.UUID(int=0))
    rows = await conn.fetch(
        f"""SELECT s.id, s.amount_minor, s.currency, s.created_at, s.provider_reference
            FROM checkout_sessions s
            WHERE s.application_id = $2 AND s.provider_name = $3 AND s.status IN ({_PAID})
              AND s.created_at >= $4 AND s.created_at < $5 AND (s.created_at, s.id) > ($6, $7)
              AND NOT EXISTS (SELECT 1 FROM reconciliation_items i WHERE i.run_id = $1 AND i.session_id = s.id
                              AND i.refund_id IS NULL)
            ORDER BY s.created_at, s.id LIMIT $8""",
        run_id,
        application_id,
        provider,
        since,
        until,
        after_at,
        after_id,
        batch,
    )
    return [
        RecordedPayment(
            row["id"],
            row["amount_minor"],
            row["currency"].strip(),
            True,
            row["created_at"],
            row["provider_reference"],
        )
        for row in rows
    ]


@on_database_thread
async def unsettled_refunds(
    conn: Connection,
    run_id: uuid.UUID,
    application_id: uuid.UUID,
    provider: str,
    since: datetime,
    until: datetime,
    after: tuple[datetime, uuid.UUID] | None,
    batch: int,
) -> list[RecordedRefund]:
    """Up to `batch` of the application's COMPLETED refunds at `provider` created in [`since`,
    `until`) that no item of the run matched, in (created_at, id) order after `after`."""
    after_at, after_id = after if after is not None else (since, uuid.UUID(int=0))
    rows = await conn.fetch(
        f"""SELECT f.id, f.session_id, f.amount_minor, f.currency, f.created_at FROM refunds f
            WHERE f.application_id = $2 AND f.provider_name = $3 AND f.status = {_COMPLETED}
              AND f.created_at >= $4 AND f.created_at < $5 AND (f.created_at, f.id) > ($6, $7)
              AND NOT EXISTS (SELECT 1 FROM reconciliation_items i WHERE i.run_id = $1 AND i.refund_id = f.id)
            ORDER BY f.created_at, f.id LIMIT $8""",
        run_id,
        application_id,
        provider,
        since,
        until,
        after_at,
        after_id,
        batch,
    )
    return [
        RecordedRefund(
            row["id"],
            row["session_id"],
            row["amount_minor"],
            row["currency"].strip(),
            True,
            row["created_at"],
        )
        for row in rows
    ]
