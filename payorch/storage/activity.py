"""A merchant's activity per UTC day: sessions created by status, completed refunds by currency;
and, over the whole window, the sessions recovery sent on to another provider and those it saved.

The reads join the merchant's applications (`applications_by_merchant`) to one index range per
application, `checkout_sessions_by_application` and `refunds_by_application`, bounded by the window
the caller passes (the recovery read then looks up each session's first attempt that ended, by
`payment_attempts_by_session`): the cost follows the rows of the window, not the history. The
window's ends come from the service's clock (`values.clock`), never the database's `now()`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import AttemptStatus, RefundStatus, SessionStatus


@dataclass(frozen=True)
class DaySessions:
    """Sessions of one status created on one UTC day."""

    day: date
    status: SessionStatus
    count: int


@dataclass(frozen=True)
class DayRefunds:
    """COMPLETED refunds in one currency created on one UTC day."""

    day: date
    currency: str
    count: int
    amount_minor: int


@dataclass(frozen=True)
class Recovery:
    """Sessions whose first attempt was declined or given up and ended with a next attempt opened at
    another provider (`sent_on`), and those of them paid at a later attempt and not reversed since
    (`recovered`)."""

    sent_on: int = 0
    recovered: int = 0


@dataclass(frozen=True)
class Activity:
    sessions: list[DaySessions]
    refunds: list[DayRefunds]
    recovery: Recovery = Recovery()


_COMPLETED_REFUNDS_BY_DAY = f"""
    SELECT (r.created_at AT TIME ZONE 'UTC')::date AS day, r.currency, count(*) AS count,
           sum(r.amount_minor) AS amount_minor
    FROM applications a
    JOIN refunds r ON r.application_id = a.id
    WHERE a.merchant_id = $1 AND r.created_at >= $2 AND r.created_at < $3
      AND r.status = '{RefundStatus.COMPLETED}'
    GROUP BY 1, 2"""

# A session's first attempt is in `payment_attempts` once it ended and the next one opened; it is
# DECLINED or CANCELED unless a late payment of it came back (SUCCEEDED, DUPLICATE_REFUNDED).
_KEPT = (SessionStatus.SUCCEEDED, SessionStatus.PARTIALLY_REFUNDED, SessionStatus.REFUNDED)
_RECOVERY = f"""
    SELECT count(*) AS sent_on,
           count(*) FILTER (WHERE s.status IN ({", ".join(f"'{status}'" for status in _KEPT)})) AS recovered
    FROM applications a
    JOIN checkout_sessions s ON s.application_id = a.id
    JOIN payment_attempts p ON p.session_id = s.id AND p.number = 1
    WHERE a.merchant_id = $1 AND s.created_at >= $2 AND s.created_at < $3
      AND p.status IN ('{AttemptStatus.DECLINED}', '{AttemptStatus.CANCELED}')"""


@on_database_thread
async def merchant_activity(
    conn: Connection, merchant_id: uuid.UUID, *, since: datetime, until: datetime
) -> Activity:
    """The sessions and the completed refunds of every application of `merchant_id` created in
    [since, until), grouped by UTC day (and status, or currency), and the recovery of those
    sessions. Only the days, statuses and currencies that have rows are listed. Run it in a
    snapshot so the reads agree."""
    session_rows = await conn.fetch(
        """SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, s.status, count(*) AS count
           FROM applications a
           JOIN checkout_sessions s ON s.application_id = a.id
           WHERE a.merchant_id = $1 AND s.created_at >= $2 AND s.created_at < $3
           GROUP BY 1, 2""",
        merchant_id,
        since,
        until,
    )
    refund_rows = await conn.fetch(
        _COMPLETED_REFUNDS_BY_DAY,
        merchant_id,
        since,
        until,
    )
    recovery = await conn.fetchrow(_RECOVERY, merchant_id, since, until)
    return Activity(
        sessions=[
            DaySessions(row["day"], SessionStatus(row["status"]), int(row["count"])) for row in session_rows
        ],
        refunds=[
            DayRefunds(row["day"], row["currency"].strip(), int(row["count"]), int(row["amount_minor"]))
            for row in refund_rows
        ],
        recovery=Recovery(int(recovery["sent_on"]), int(recovery["recovered"])),
    )
