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
# Whether the run has an item matching the session (the refund): a scalar subquery, which PostgreSQL
# runs for each row as a lookup by the index on (run, session), and never turns into a join. As a
# NOT EXISTS, PostgreSQL plans an anti join from the items table's statistics, stale while a run
# fills it (its items are not analysed yet): it then scanned every item of the run for each
# session, a cost quadratic in the period (2 s of a run of 30,000 payments, far more at 100,000).
_UNMATCHED_SESSION = """(SELECT 1 FROM reconciliation_items i
    WHERE i.run_id = $1 AND i.session_id = s.id AND i.refund_id IS NULL LIMIT 1) IS NULL"""
_UNMATCHED_REFUND = """(SELECT 1 FROM reconciliation_items i
    WHERE i.run_id = $1 AND i.refund_id = f.id LIMIT 1) IS NULL"""


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


# A session's own checkout (or payment id), then an ended attempt's, each reference looked up by
# equality on its own index: one join per column, so that PostgreSQL probes the index once per
# reference instead of testing every reference against every row found.
_SESSION_BY = """SELECT 0 AS rank, r.reference, s.id, s.amount_minor, s.currency,
                        s.status IN ({paid}) AS paid, s.created_at, s.provider_reference AS checkout
                 FROM unnest($3::text[]) AS r (reference)
                 JOIN checkout_sessions s ON s.provider_name = $2 AND s.{column} = r.reference
                 WHERE s.application_id = $1"""
_ATTEMPT_BY = """SELECT 1, r.reference, s.id, s.amount_minor, s.currency, a.status = {paid}, s.created_at,
                        a.provider_reference
                 FROM unnest($3::text[]) AS r (reference)
                 JOIN payment_attempts a ON a.provider_name = $2 AND a.{column} = r.reference
                 JOIN checkout_sessions s ON s.id = a.session_id
                 WHERE a.application_id = $1"""
_REFERENCE_COLUMNS = ("provider_reference", "provider_payment_reference")
_RECORDED_PAYMENTS = (
    "\nUNION ALL\n".join(
        [_SESSION_BY.format(paid=_PAID, column=column) for column in _REFERENCE_COLUMNS]
        + [_ATTEMPT_BY.format(paid=_ATTEMPT_PAID, column=column) for column in _REFERENCE_COLUMNS]
    )
    + "\nORDER BY rank DESC"
)


@on_database_thread
async def recorded_payments(
    conn: Connection, application_id: uuid.UUID, provider: str, references: list[str]
) -> dict[str, RecordedPayment]:
    """The application's sessions by the provider's payment `references`: a session's own checkout
    (or the payment's own id) first, else an ended attempt's (none asked: no statement)."""
    if not references:
        return {}
    rows = await conn.fetch(_RECORDED_PAYMENTS, application_id, provider, references)
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
    """The application's refunds at `provider` by the provider's refund `references` (none asked: no
    statement)."""
    if not references:
        return {}
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
              AND {_UNMATCHED_SESSION}
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
              AND {_UNMATCHED_REFUND}
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
