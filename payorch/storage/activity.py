"""A merchant's activity per UTC day: sessions created by status, completed refunds by currency.

Both reads join the merchant's applications (`applications_by_merchant`) to one index range per
application, `checkout_sessions_by_application` and `refunds_by_application`, bounded by the window
the caller passes: the cost follows the rows of the window, not the history. The window's ends come
from the service's clock (`values.clock`), never the database's `now()`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import RefundStatus, SessionStatus


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
class Activity:
    sessions: list[DaySessions]
    refunds: list[DayRefunds]


_COMPLETED_REFUNDS_BY_DAY = f"""
    SELECT (r.created_at AT TIME ZONE 'UTC')::date AS day, r.currency, count(*) AS count,
           sum(r.amount_minor) AS amount_minor
    FROM applications a
    JOIN refunds r ON r.application_id = a.id
    WHERE a.merchant_id = $1 AND r.created_at >= $2 AND r.created_at < $3
      AND r.status = '{RefundStatus.COMPLETED}'
    GROUP BY 1, 2"""


@on_database_thread
async def merchant_activity(
    conn: Connection, merchant_id: uuid.UUID, *, since: datetime, until: datetime
) -> Activity:
    """The sessions and the completed refunds of every application of `merchant_id` created in
    [since, until), grouped by UTC day (and status, or currency). Only the days, statuses and
    currencies that have rows are listed. Run it in a snapshot so the two reads agree."""
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
    return Activity(
        sessions=[
            DaySessions(row["day"], SessionStatus(row["status"]), int(row["count"])) for row in session_rows
        ],
        refunds=[
            DayRefunds(row["day"], row["currency"].strip(), int(row["count"]), int(row["amount_minor"]))
            for row in refund_rows
        ],
    )
