"""An application's past sessions as routing saw them, for a backtest (`engine.routing.backtest`):
each session's payment method, amount, customer's billing country, the provider of its first
attempt and that attempt's outcome there, what decided it (the version of the routing document in
force and the reason its provider was first), and, for a session that had more than one attempt,
each of them; newest first, read in bounded batches through a server-side cursor. A backtest's
worker process reads them over its own connection (`engine.routing.backtest_worker`), never the
server; it reads the routing documents that decided them (`routing_documents_of`) the same way.

Only those few columns are read: the customer's billing country is taken out of its JSON in the
statement, so no other JSON reaches payorch. A batch walks the application's sessions index
(`checkout_sessions_by_application`: application, creation time and id, newest first) from where
the previous one stopped, so each costs its own rows, however far back it starts. A session's ended
attempts (`payment_attempts`, migration 0022) are found by that table's index on the session: one
probe a session, nothing read for one that had a single attempt.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from asyncpg import Record

from payorch.jsonexact import loads_exact
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.enumerated_columns import sql_literal
from payorch.values.statuses import AttemptStatus, FailureReason, Outcome, RoutingReason, SessionStatus


class PastAttempt(NamedTuple):
    """One payment attempt of a session that had more than one: its provider, whether it was paid,
    whether its provider declined it, and the decline's reason and the provider's own code (kept
    only for an attempt followed by another: payorch keeps the code of the decline it recovered)."""

    provider: str
    paid: bool
    declined: bool
    failure_reason: FailureReason | None = None
    provider_code: str | None = None


class PastSession(NamedTuple):
    """One session a backtest replays (a named tuple: a backtest holds a batch of many)."""

    session_id: str  # as the API writes it: routing's draws are made from this text
    payment_method: str
    amount_minor: int
    currency: str
    billing_country: str | None
    provider: str  # the provider of its first attempt: the one routing chose when it was created
    outcome: Outcome | None  # that attempt's outcome there; None while it has none
    # The version of the routing document that decided it (0: the default document); None for a
    # session created before payorch kept it.
    version: int | None = None
    reason: RoutingReason | None = None  # why its first attempt's provider was first; None: not kept
    # Every attempt, oldest first, when it had more than one; empty when it had only its first.
    attempts: tuple[PastAttempt, ...] = ()


# The outcome routing learned for the session's first attempt (`routing_outcomes`, migrations 0017
# and 0024: its last verdict, at its provider), so what routing's own choice got, not what recovery
# at a next provider made of the session. A session created before payorch recorded outcomes has
# none there: its status says what became of it, as far as it can (a REVERSED one cannot say
# whether it was paid).
_PAID_STATUSES = (SessionStatus.SUCCEEDED, SessionStatus.PARTIALLY_REFUNDED, SessionStatus.REFUNDED)
_PAID = ", ".join(sql_literal(status) for status in _PAID_STATUSES)
_OUTCOME = f"""COALESCE(o.outcome, CASE
        WHEN s.status IN ({_PAID}) THEN {sql_literal(Outcome.SUCCESS)}
        WHEN s.status = {sql_literal(SessionStatus.FAILED)}
         AND s.failure_reason = {sql_literal(FailureReason.EXPIRED)} THEN {sql_literal(Outcome.ABANDONMENT)}
        WHEN s.status = {sql_literal(SessionStatus.FAILED)} THEN {sql_literal(Outcome.FAILURE)}
    END)"""

# A session's ended attempts, oldest first, as one JSON text (NULL when it has none): each
# [provider, status, failure reason, provider's code], and the first one's routing reason.
_ENDED = """
    LEFT JOIN LATERAL (
        SELECT json_agg(json_build_array(a.provider_name, a.status, a.failure_reason, a.provider_code)
                        ORDER BY a.number)::text AS attempts,
               (array_agg(a.routing_reason ORDER BY a.number))[1] AS first_reason,
               (array_agg(a.provider_name ORDER BY a.number))[1] AS first_provider,
               count(*) AS count
        FROM payment_attempts a WHERE a.session_id = s.id
    ) ended ON true"""
# The outcome of the attempt now open, for a session with ended attempts (its number is one more).
_OPEN_OUTCOME = """CASE WHEN ended.count > 0 THEN (
        SELECT r.outcome FROM routing_outcomes r
        WHERE r.session_id = s.id AND r.attempt_number = ended.count + 1) END"""

_PAST_SESSIONS = f"""
    SELECT s.id, s.created_at, s.payment_method, s.amount_minor, s.currency,
           s.customer #>> '{{billingAddress,country}}' AS country,
           coalesce(o.provider_name, ended.first_provider, s.provider_name), {_OUTCOME} AS outcome,
           s.routing_version, coalesce(ended.first_reason, s.routing_reason), ended.attempts,
           s.status IN ({_PAID}) AS paid, s.provider_name, {_OPEN_OUTCOME}
    FROM checkout_sessions s
    LEFT JOIN routing_outcomes o ON o.session_id = s.id AND o.attempt_number = 1
    {_ENDED}
    WHERE s.application_id = $1 AND s.created_at >= $2 AND (s.created_at, s.id) < ($3, $4)
      AND s.provider_name IS NOT NULL
    ORDER BY s.created_at DESC, s.id DESC
    LIMIT $5"""

_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_REASONS = {reason.value: reason for reason in RoutingReason}
_FAILURES = {reason.value: reason for reason in FailureReason}
_ENDED_PAID = {AttemptStatus.SUCCEEDED.value, AttemptStatus.DUPLICATE_REFUNDED.value}
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
            row[8],
            None if row[9] is None else _REASONS.get(row[9]),
            () if row[10] is None else _attempts(json.loads(row[10]), names, row[11:]),
        )
        for row in rows
    ]


def _attempts(
    ended: list[list[Any]], names: dict[str, str], open_attempt: Sequence[Any]
) -> tuple[PastAttempt, ...]:
    """The ended attempts `ended` (as `_ENDED` writes them), then the session's open one (whether
    the session is paid, its row's provider, that attempt's outcome): paid when its outcome is, or
    when the session is and no ended attempt was (a late payment of an ended attempt completes the
    session too); declined when its outcome is a failure."""
    attempts = [
        PastAttempt(
            names.setdefault(provider, provider),
            paid=status in _ENDED_PAID,
            declined=status == AttemptStatus.DECLINED.value,
            failure_reason=None if reason is None else _FAILURES.get(reason),
            provider_code=code,
        )
        for provider, status, reason, code in ended
    ]
    session_paid, provider, outcome = open_attempt
    paid = outcome == Outcome.SUCCESS.value or (session_paid and not any(a.paid for a in attempts))
    declined = outcome == Outcome.FAILURE.value
    attempts.append(PastAttempt(names.setdefault(provider, provider), paid=paid, declined=declined))
    return tuple(attempts)


_DOCUMENTS = """SELECT version, document::text FROM routing_documents
                WHERE application_id = $1 AND version = ANY($2::int[])"""


@on_database_thread
async def routing_documents_of(
    conn: Connection, application_id: uuid.UUID, versions: Collection[int]
) -> dict[int, dict[str, Any]]:
    """The application's stored routing documents of `versions`, by version, in their JSON form
    (numbers as exact `Decimal`s); a version it never stored is left out."""
    rows = await conn.fetch(_DOCUMENTS, application_id, sorted(versions))
    return {row[0]: loads_exact(row[1]) for row in rows}
