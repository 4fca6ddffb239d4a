"""Ending a session's open payment attempt and opening the next, in one transaction under the
session's row lock.

The ended attempt's outcome at its provider, for learned routing (`storage.routing_outcomes`), is
recorded in the same transaction: a declined attempt is a failure there.

The open attempt is the session's row (`storage.sessions.CheckoutSession`); ending it writes it into
`payment_attempts` (`storage.attempts`) as it ended, and the session's row takes the next attempt's
provider, checkout reference, checkout URL and routing, in one statement. The caller names the
attempt it ends by its checkout: a second call for the same attempt (a double return, a reload, two
tabs, two processes) waits for the first's lock, then finds another attempt open and changes
nothing. So a session never has two attempts open, however many ask at once.

`returning_session` reads what deciding on the next attempt takes: the session, the request it was
created from (to route it again), and its ended attempts (the providers already tried).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from payorch.metrics import Metrics
from payorch.storage.attempts import EndedAttempt, ended_attempts, ended_attempts_of
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.routing_outcomes import record_outcome
from payorch.storage.sessions import CheckoutSession, SessionDraft, checkout_session, lock_session
from payorch.values.money import Money
from payorch.values.statuses import AttemptStatus, FailureReason, Outcome, RoutingReason, SessionStatus


@dataclass(frozen=True)
class AttemptEnding:
    """How the session's open attempt, named by its checkout, ended."""

    provider_name: str
    provider_reference: str
    status: AttemptStatus  # how it ended: any but OPEN
    failure_reason: FailureReason | None = None
    provider_code: str | None = None  # the provider's own decline code

    def __post_init__(self) -> None:
        if self.status is AttemptStatus.OPEN:
            raise ValueError("an attempt that ends is no longer OPEN")

    @property
    def outcome(self) -> Outcome:
        """What the ending is for learned routing: a decline a failure, a payment a success, any
        other ending (a cancel, a checkout closed unpaid) an abandonment."""
        if self.status is AttemptStatus.DECLINED:
            return Outcome.FAILURE
        if self.status in (AttemptStatus.SUCCEEDED, AttemptStatus.DUPLICATE_REFUNDED):
            return Outcome.SUCCESS
        return Outcome.ABANDONMENT


@dataclass(frozen=True)
class NextAttempt:
    """The checkout a provider created for the session's next attempt, and why routing sent it there."""

    provider_name: str
    provider_reference: str
    checkout_url: str
    routing_score: Decimal
    routing_rule: str | None  # the rule whose order the attempt follows; None: the default route
    routing_reason: RoutingReason
    routing_version: int  # of the routing document whose decision gave the provider


_NEXT_COLUMNS = list(NextAttempt.__dataclass_fields__)
_SESSION_COLUMNS = ", ".join(CheckoutSession.__dataclass_fields__)

# $1 the session, $2 the ended attempt's id, $3-$5 how it ended, $6 now, then the next attempt's
# columns. The ended attempt is the session's row as it was (a CTE reads the statement's snapshot),
# numbered after the session's last ended one and opened when that one ended (or with the session).
_END_AND_OPEN_NEXT = f"""
    WITH ended AS (
        INSERT INTO payment_attempts (id, session_id, application_id, number, provider_name,
                                      provider_reference, status, failure_reason, provider_code,
                                      routing_reason, created_at, ended_at)
        SELECT $2::uuid, s.id, s.application_id, coalesce(last.number, 0) + 1, s.provider_name,
               s.provider_reference, $3::text, $4::text, $5::text, s.routing_reason,
               coalesce(last.ended_at, s.created_at), $6::timestamptz
        FROM checkout_sessions s
        LEFT JOIN LATERAL (
            SELECT number, ended_at FROM payment_attempts
            WHERE session_id = s.id ORDER BY number DESC LIMIT 1
        ) last ON true
        WHERE s.id = $1
    )
    UPDATE checkout_sessions
    SET {", ".join(f"{name} = ${index}" for index, name in enumerate(_NEXT_COLUMNS, start=7))},
        next_attempt_asked_at = NULL, updated_at = $6
    WHERE id = $1
    RETURNING {_SESSION_COLUMNS}"""


@on_database_thread
async def open_next_attempt(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    ending: AttemptEnding,
    next_attempt: NextAttempt,
    now: datetime,
    metrics: Metrics | None = None,
) -> CheckoutSession | None:
    """End the session's open attempt as `ending` says and open `next_attempt` at `now`, in the
    caller's transaction, holding the session's row lock to its end: the session as it now is.

    None, with nothing changed, unless the session is `application_id`'s, still PENDING, and its open
    attempt is still the checkout `ending` names. The ended attempt's outcome is recorded for learned
    routing (`storage.routing_outcomes`: a verdict recorded before that says more stays), and
    counted in `metrics` (the attempt ended; its outcome if this recorded it). Which provider comes
    next, and whether one may, is the caller's to decide (`engine.routing.recovery`); this only
    keeps the session's attempts whole."""
    session = await lock_session(conn, session_id)
    if (
        session is None
        or session.application_id != application_id
        or session.status is not SessionStatus.PENDING
        or session.provider_name != ending.provider_name
        or session.provider_reference != ending.provider_reference
    ):
        return None
    # Before the next attempt opens: until then the session's open attempt is the one that ends.
    recorded = await record_outcome(
        conn,
        application_id=application_id,
        session_id=session_id,
        provider=ending.provider_name,
        payment_method=session.payment_method,
        currency=session.currency,
        outcome=ending.outcome,
        now=now,
    )
    if metrics is not None:
        outcome = recorded.outcome.name.lower()
        if recorded.written:
            metrics.routing_outcome(ending.provider_name, session.payment_method, outcome)
        metrics.payment_attempt_ended(ending.provider_name, outcome)
    row = await conn.fetchrow(
        _END_AND_OPEN_NEXT,
        session_id,
        uuid.uuid4(),
        ending.status,
        ending.failure_reason,
        ending.provider_code,
        now,
        *(getattr(next_attempt, name) for name in _NEXT_COLUMNS),
    )
    return checkout_session(row)


@on_database_thread
async def next_attempt_asked_at(
    conn: Connection, session_id: uuid.UUID, provider_reference: str, now: datetime
) -> datetime | None:
    """When the next attempt after the session's open attempt (the checkout `provider_reference`)
    was first asked for: `now` for the first return that asks, the first one's moment for every
    later or racing return, on any process, so that all of them ask the next provider for the same
    checkout with the same parameters (its idempotency key meets the same request). None when the
    session's open attempt is no longer that checkout."""
    asked: datetime | None = await conn.fetchval(
        """UPDATE checkout_sessions SET next_attempt_asked_at = coalesce(next_attempt_asked_at, $3)
           WHERE id = $1 AND provider_reference = $2 RETURNING next_attempt_asked_at""",
        session_id,
        provider_reference,
        now,
    )
    return asked


@on_database_thread
async def next_attempt_asked(
    conn: Connection, session_id: uuid.UUID, provider_reference: str
) -> datetime | None:
    """When a return first asked for the next attempt after the session's open attempt (the checkout
    `provider_reference`, `next_attempt_asked_at`); None when none has, or the open attempt is no
    longer that checkout."""
    asked: datetime | None = await conn.fetchval(
        "SELECT next_attempt_asked_at FROM checkout_sessions WHERE id = $1 AND provider_reference = $2",
        session_id,
        provider_reference,
    )
    return asked


@dataclass(frozen=True)
class ReturningSession:
    """A session as its customer comes back from an attempt's checkout: the session (its open
    attempt), the merchant's request it was created from, and its ended attempts, oldest first."""

    session: CheckoutSession
    draft: SessionDraft
    ended: list[EndedAttempt]


_DRAFT_COLUMNS = [name for name in SessionDraft.__dataclass_fields__ if name != "amount"]
_RETURNING = f"""
    SELECT {_SESSION_COLUMNS}, {", ".join(f"{name} AS draft_{name}" for name in _DRAFT_COLUMNS)},
           ({ended_attempts_of("checkout_sessions.id")}) AS ended_attempts
    FROM checkout_sessions WHERE id = $1"""


@on_database_thread
async def returning_session(conn: Connection, session_id: uuid.UUID) -> ReturningSession | None:
    """The session `session_id` with its request and ended attempts, in one statement; None when
    there is no such session."""
    row = await conn.fetchrow(_RETURNING, session_id)
    if row is None:
        return None
    values = {name: row[f"draft_{name}"] for name in _DRAFT_COLUMNS}
    draft = SessionDraft(amount=Money(row["amount_minor"], row["currency"]), **values)
    return ReturningSession(checkout_session(row), draft, ended_attempts(row["ended_attempts"]))
