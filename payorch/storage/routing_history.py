"""An application's past sessions as routing saw them, for a backtest (`engine.routing.backtest`):
each session's payment method, amount, customer's billing country, the provider of its first
attempt and that attempt's outcome there, newest first, read in bounded batches through a server-side cursor.
A backtest's worker process reads them over its own connection (`engine.routing.backtest_worker`), never
the server.

Only those few columns are read: the customer's billing country is taken out of its JSON in the
statement, so no JSON reaches payorch. A batch walks the application's sessions index
(`checkout_sessions_by_application`: application, creation time and id, newest first) from where
the previous one stopped, so each costs its own rows, however far back it starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import NamedTuple

from asyncpg import Record

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.enumerated_columns import sql_literal
from payorch.values.statuses import FailureReason, Outcome, SessionStatus


class PastSession(NamedTuple):
    """One session a backtest replays (a named tuple: a backtest holds a batch of many)."""

    session_id: str  # as the API writes it: routing's draws are made from this text
    payment_method: str
    amount_minor: int
    currency: str
    billing_country: str | None
    provider: str  # the provider of its first attempt: the one routing chose when it was created
    outcome: Outcome | None  # that attempt's outcome there; None while it has none


# The outcome routing learned for the session's first attempt (`routing_outcomes`, migrations 0017
# and 0024: its last verdict, at its provider), so what routing's own choice got, not what recovery
# at a next provider made of the session. A session created before payorch recorded outcomes has
# none there: its status says what became of it, as far as it can (a REVERSED one cannot say
# whether it was paid).
_PAID = ", ".join(
    sql_literal(status)
    for status in (SessionStatus.SUCCEEDED, SessionStatus.PARTIALLY_REFUNDED, SessionStatus.REFUNDED)
)
_OUTCOME = f"""COALESCE(o.outcome, CASE
        WHEN s.status IN ({_PAID}) THEN {sql_literal(Outcome.SUCCESS)}
        WHEN s.status = {sql_literal(SessionStatus.FAILED)}
         AND s.failure_reason = {sql_literal(FailureReason.EXPIRED)} THEN {sql_literal(Outcome.ABANDONMENT)}
        WHEN s.status = {sql_literal(SessionStatus.FAILED)} THEN {sql_literal(Outcome.FAILURE)}
    END)"""

_PAST_SESSIONS = f"""
    SELECT s.id, s.created_at, s.payment_method, s.amount_minor, s.currency,
           s.customer #>> '{{billingAddress,country}}' AS country,
           coalesce(o.provider_name, s.provider_name), {_OUTCOME} AS outcome
    FROM checkout_sessions s
    LEFT JOIN routing_outcomes o ON o.session_id = s.id AND o.attempt_number = 1
    WHERE s.application_id = $1 AND s.created_at >= $2 AND (s.created_at, s.id) < ($3, $4)
      AND s.provider_name IS NOT NULL
    ORDER BY s.created_at DESC, s.id DESC
    LIMIT $5"""

_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
# Past every id: the window's end `until` includes the sessions created at `until` itself.
_LAST_ID = uuid.UUID(int=2**128 - 1)


@on_database_thread
async def read_past_sessions(
    conn: Connection,
    application_id: uuid.UUID,
    since: datetime,
    until: datetime,
    limit: int,
    batch: int,
    each: Callable[[list[PastSession]], Awaitable[None]],
) -> datetime | None:
    """Call `each` with the application's sessions created from `since` until `until`, newest
    first, `batch` at a time, `limit` of them at most. One statement, read through a server-side
    cursor (so in a transaction the caller opens: read-only, REPEATABLE READ), `batch` rows a fetch:
    the reader's memory follows a batch, not the window. Answers the creation time of the oldest
    session given when the window held more than `limit` (the newest `limit` were given), else None."""
    cursor = await conn.cursor(_PAST_SESSIONS, application_id, since, until, _LAST_ID, limit + 1)
    left, oldest = limit, None
    while left > 0:
        wanted = min(batch, left)
        rows = await cursor.fetch(wanted)
        if rows:
            await each(_past_sessions(rows))
            oldest = rows[-1][1]
        if len(rows) < wanted:
            return None  # the window ended first
        left -= wanted
    return oldest if await cursor.fetchrow() is not None else None


def _past_sessions(rows: Sequence[Record]) -> list[PastSession]:
    # A batch names a few payment methods, currencies, countries and providers many times: one
    # string each, not one per row.
    names: dict[str, str] = {}
    return [
        PastSession(
            str(row[0]),
            names.setdefault(row[2], row[2]),
            row[3],
            names.setdefault(row[4], row[4]),
            None if row[5] is None else names.setdefault(row[5], row[5]),
            names.setdefault(row[6], row[6]),
            None if row[7] is None else _OUTCOMES[row[7]],
        )
        for row in rows
    ]
