"""A session's payment attempts that have ended (migration 0022), and how a session read folds them in.

The attempt now open is the session's own row (its provider, checkout reference, checkout URL and
routing: `storage.sessions.CheckoutSession`); the ended ones are rows of `payment_attempts`, written
when the next attempt opens (`storage.next_attempt`). A read of sessions takes each one's ended
attempts in the statement that reads the session (`ended_attempts_of`, decoded by `ended_attempts`):
no round trip more, and nothing more read for a session that has none.

A provider's event about an ended attempt's checkout finds it by that checkout
(`ended_attempt_of_checkout`, migration 0025); a late payment there marks it SUCCEEDED, or
DUPLICATE_REFUNDED with the refund payorch made for it, and a refund of the session returns the
payment of the attempt that was paid (`refunded_payment`). When a late payment paid the session
and its open attempt's checkout was paid too, that attempt is written here as it ends
(`insert_ended_attempt`), its checkout still the session row's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import AttemptStatus, FailureReason, RoutingReason


@dataclass(frozen=True)
class EndedAttempt:
    """A payment attempt of a session that has ended: a checkout at one provider, and how it ended."""

    id: uuid.UUID
    session_id: uuid.UUID
    application_id: uuid.UUID
    number: int  # the session's first attempt is 1
    provider_name: str
    provider_reference: str  # the provider's id of the attempt's checkout
    status: AttemptStatus  # never OPEN
    failure_reason: FailureReason | None
    provider_code: str | None  # the provider's own decline code
    routing_reason: RoutingReason | None  # None: a session created before payorch kept it
    created_at: datetime
    ended_at: datetime


_FIELDS = tuple(EndedAttempt.__dataclass_fields__)
_COLUMNS = ", ".join(_FIELDS)
_OPTIONAL_ENUMERATED: tuple[tuple[str, type[FailureReason | RoutingReason]], ...] = (
    ("failure_reason", FailureReason),
    ("routing_reason", RoutingReason),
)


def ended_attempt(row: Mapping[str, Any]) -> EndedAttempt:
    """The attempt of a row, or of one object of `ended_attempts_of`'s array, that holds
    `EndedAttempt`'s columns by their names (an object's as JSON gives them: text for the ids and
    times)."""
    values = {name: row[name] for name in _FIELDS}
    for name in ("id", "session_id", "application_id"):
        if isinstance(values[name], str):
            values[name] = uuid.UUID(values[name])
    for name in ("created_at", "ended_at"):
        if isinstance(values[name], str):
            values[name] = datetime.fromisoformat(values[name]).astimezone(UTC)
    values["number"] = int(values["number"])
    values["status"] = AttemptStatus(values["status"])
    for name, enumeration in _OPTIONAL_ENUMERATED:
        if values[name] is not None:
            values[name] = enumeration(values[name])
    return EndedAttempt(**values)


def ended_attempts_of(session_id: str) -> str:
    """A subquery answering the ended attempts of the session whose id is the SQL expression
    `session_id`, oldest first, as one JSON array: NULL when it has none. For a session read's
    statement to take them with the session (a scalar subquery, or a LEFT JOIN LATERAL), read by
    the index on (session_id, number)."""
    fields = ", ".join(f"'{name}', a.{name}" for name in _FIELDS)
    return f"""SELECT json_agg(json_build_object({fields}) ORDER BY a.number)
               FROM payment_attempts a WHERE a.session_id = {session_id}"""


def ended_attempts(value: object) -> list[EndedAttempt]:
    """The attempts of one value `ended_attempts_of` answered (decoded from JSON), oldest first."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"expected the JSON array of ended attempts, got {type(value).__name__}")
    return [ended_attempt(item) for item in value]


_ATTEMPTS_OF_SESSION = f"SELECT {_COLUMNS} FROM payment_attempts WHERE session_id = $1 ORDER BY number"


@on_database_thread
async def attempts_of_session(conn: Connection, session_id: uuid.UUID) -> list[EndedAttempt]:
    """The session's ended attempts, oldest first (its open attempt is the session's row)."""
    return [ended_attempt(row) for row in await conn.fetch(_ATTEMPTS_OF_SESSION, session_id)]


_OF_CHECKOUT = f"""SELECT {_COLUMNS} FROM payment_attempts
                   WHERE provider_name = $1 AND provider_reference = $2"""


@on_database_thread
async def ended_attempt_of_checkout(
    conn: Connection, provider_name: str, provider_reference: str
) -> EndedAttempt | None:
    """The ended attempt whose checkout is `provider_reference` at `provider_name`, read by the
    index of migration 0025; None when no ended attempt has it (it may be a session's open one)."""
    row = await conn.fetchrow(_OF_CHECKOUT, provider_name, provider_reference)
    return None if row is None else ended_attempt(row)


_INSERT = f"""INSERT INTO payment_attempts ({_COLUMNS})
              VALUES ({", ".join(f"${index}" for index in range(1, len(_FIELDS) + 1))})"""


@on_database_thread
async def insert_ended_attempt(conn: Connection, attempt: EndedAttempt) -> None:
    """Record `attempt` as ended, in the caller's transaction, which holds its session's row lock:
    the session's open attempt that ends without a next one opening (paid after a late success of
    an ended attempt paid the session, `engine.payments.late_payments`)."""
    await conn.execute(_INSERT, *(getattr(attempt, name) for name in _FIELDS))


@on_database_thread
async def set_attempt_status(conn: Connection, attempt_id: uuid.UUID, status: AttemptStatus) -> None:
    """Record how an ended attempt turned out after it ended (a late payment at its provider), in the
    caller's transaction, which holds its session's row lock."""
    if status is AttemptStatus.OPEN:
        raise ValueError("an ended attempt is never OPEN again")
    await conn.execute("UPDATE payment_attempts SET status = $2 WHERE id = $1", attempt_id, status)


@on_database_thread
async def mark_duplicate_refunded(conn: Connection, attempt_id: uuid.UUID, refund_id: uuid.UUID) -> None:
    """Record that the ended attempt's payment, made after another attempt of its session was paid,
    is being returned by the refund `refund_id` payorch created for it, in the caller's transaction."""
    await conn.execute(
        "UPDATE payment_attempts SET status = $2, refund_id = $3 WHERE id = $1",
        attempt_id,
        AttemptStatus.DUPLICATE_REFUNDED,
        refund_id,
    )


_REFUNDED_PAYMENT = f"""
    SELECT provider_name, provider_reference FROM payment_attempts
    WHERE session_id = $1 AND (refund_id = $2::uuid OR status = '{AttemptStatus.SUCCEEDED}')
    ORDER BY refund_id = $2::uuid DESC NULLS LAST, number LIMIT 1"""


@on_database_thread
async def refunded_payment(
    conn: Connection, session_id: uuid.UUID, refund_id: uuid.UUID
) -> tuple[str, str] | None:
    """The provider and checkout of the payment the refund `refund_id` of the session returns, when
    it is an ended attempt's: the duplicate payment payorch refunds by itself, or the session's own
    payment when a late success of an ended attempt completed the session. None: the session's open
    attempt's payment (its row's provider and checkout)."""
    row = await conn.fetchrow(_REFUNDED_PAYMENT, session_id, refund_id)
    return None if row is None else (row["provider_name"], row["provider_reference"])
