"""Checkout sessions."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import asyncpg

from payorch.storage import daily_counters, due_work
from payorch.storage.attempts import EndedAttempt, ended_attempts, ended_attempts_of
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.idempotency_keys import fresh_claim_cte
from payorch.storage.pages import read_page
from payorch.values.money import Money
from payorch.values.pagination import PageRequest
from payorch.values.statuses import FailureReason, RoutingReason, SessionStatus


@dataclass(frozen=True)
class CheckoutSession:
    """A stored session, as the reads and state changes use it."""

    id: uuid.UUID
    application_id: uuid.UUID
    order_reference: str
    amount_minor: int
    currency: str
    status: SessionStatus
    failure_reason: FailureReason | None
    provider_name: str | None
    provider_reference: str | None
    payment_method: str
    checkout_url: str | None
    routing_score: Decimal | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    dispute_lost_at: datetime | None = None  # when a lost dispute was last reported
    # Why it was routed to its provider (docs/routing.md); None for a session created before
    # payorch kept it (migration 0016).
    routing_rule: str | None = None
    routing_reason: RoutingReason | None = None
    routing_version: int | None = None
    customer: dict[str, Any] | None = None  # as given at create (its JSON object)


_COLUMNS = ", ".join(CheckoutSession.__dataclass_fields__)


def checkout_session(row: Mapping[str, Any]) -> CheckoutSession:
    """The session of a row that holds `CheckoutSession`'s columns (by their names)."""
    values = {name: row[name] for name in CheckoutSession.__dataclass_fields__}
    values["status"] = SessionStatus(values["status"])
    if values["failure_reason"] is not None:
        values["failure_reason"] = FailureReason(values["failure_reason"])
    if values["routing_reason"] is not None:
        values["routing_reason"] = RoutingReason(values["routing_reason"])
    return CheckoutSession(**values)


@dataclass(frozen=True)
class SessionDraft:
    """A validated request to create a checkout session: what the merchant asked for, stored as it
    is once a provider has created the session's checkout (`NewSession`)."""

    application_id: uuid.UUID
    order_reference: str
    amount: Money  # amount.total; stored as `amount_minor` and `currency`
    shipping_minor: int
    tax_minor: int
    payment_method: str
    locale: str | None
    customer: dict[str, Any]
    order_items: list[dict[str, Any]] | None
    shipping: dict[str, Any] | None
    additional_information: dict[str, Any] | None
    redirect_urls: dict[str, Any] | None


@dataclass(frozen=True)
class NewSession:
    """A session to store: its draft, and the checkout that the provider it was routed to created."""

    id: uuid.UUID
    draft: SessionDraft
    expires_at: datetime
    provider_name: str
    provider_reference: str
    checkout_url: str
    routing_score: Decimal
    routing_rule: str | None  # the matching rule's name; None: the document's default route
    routing_reason: RoutingReason
    routing_version: int  # of the routing document that decided; 0: the default document


# The columns a new session fills: the draft's own (its amount split in two), then the rest of
# `NewSession`'s, in the order of `_new_session_values`.
_DRAFT_COLUMNS = [name for name in SessionDraft.__dataclass_fields__ if name != "amount"]
_ROUTED_COLUMNS = [name for name in NewSession.__dataclass_fields__ if name not in ("id", "draft")]
_NEW_COLUMNS = ["id", *_DRAFT_COLUMNS, "amount_minor", "currency", *_ROUTED_COLUMNS]


def _new_session_values(new: NewSession) -> tuple[object, ...]:
    draft = new.draft
    return (
        new.id,
        *(getattr(draft, name) for name in _DRAFT_COLUMNS),
        draft.amount.minor,
        draft.amount.currency,
        *(getattr(new, name) for name in _ROUTED_COLUMNS),
    )


@dataclass(frozen=True)
class AnsweredSession:
    """A new session, and the answer its Idempotency-Key replays from the moment it is stored."""

    session: NewSession
    created_at: datetime
    scope: str
    key: str
    status: int
    body: Mapping[str, object]


def answered_statement(first: int) -> str:
    """The end of one statement that stores an `AnsweredSession` (its session, its key's answer,
    and the created sessions it adds to the daily counters), its parameters numbered from `first`
    in the order `answered_values` gives them: CTEs and the final UPDATE, to follow `WITH` (and the
    caller's own CTEs)."""
    places = _AnsweredPlaces(first)
    return f"""{places.stored("$" + str(first))}, {places.counted()}
    UPDATE idempotency_keys SET response_status = ${places.status}, response_body = ${places.body}
    WHERE application_id = ${places.column("application_id")}
      AND scope = ${places.scope} AND key = ${places.key}"""


def claimed_statement(first: int) -> str:
    """As `answered_statement`, but the session's Idempotency-Key is claimed, with its answer, by
    the same statement, which fails (`claim_was_not_fresh`) unless the key is new or expired: the
    session takes the fresh claim's id, and there is none for a key seen before. Its parameters:
    `answered_values`', then `fresh_claim_values`'. CTEs and a final SELECT, to follow `WITH`."""
    places = _AnsweredPlaces(first)
    claim = fresh_claim_cte(
        application=places.column("application_id"),
        scope=places.scope,
        key=places.key,
        resource=places.column("id"),
        status=places.status,
        body=places.body,
        first=places.added + 1,
    )
    return f"""{claim}, {places.stored("(SELECT resource_id FROM claim)")}, {places.counted()}
    SELECT 1"""


def claim_was_not_fresh(error: BaseException) -> bool:
    """Whether `error` is the failure of a `claimed_statement` whose key was seen before."""
    return (
        isinstance(error, asyncpg.NotNullViolationError)
        and error.table_name == "checkout_sessions"
        and error.column_name == "id"
    )


class _AnsweredPlaces:
    """Where `answered_values`' parameters are in a statement that numbers them from `first`."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.created, self.scope, self.key, self.status, self.body, self.shard, self.added = range(
            first + len(_NEW_COLUMNS), first + len(_NEW_COLUMNS) + 7
        )

    def column(self, name: str) -> int:
        return self.first + _NEW_COLUMNS.index(name)

    def stored(self, session_id: str) -> str:
        """The CTE that inserts the session, its id given by the SQL expression `session_id`."""
        values = [
            session_id,
            *(f"${index}" for index in range(self.first + 1, self.first + len(_NEW_COLUMNS))),
        ]
        return f"""stored AS (
        INSERT INTO checkout_sessions ({", ".join(_NEW_COLUMNS)}, status, created_at, updated_at)
        VALUES ({", ".join(values)}, '{SessionStatus.PENDING}', ${self.created}, ${self.created})
    )"""

    def counted(self) -> str:
        return daily_counters.created_counter(
            self.column("application_id"),
            self.created,
            self.column("provider_name"),
            self.column("currency"),
            self.shard,
            self.added,
        )


def answered_values(item: AnsweredSession, shard: int, added: int) -> tuple[object, ...]:
    """The parameters of `answered_statement` for `item`, adding `added` created sessions to its
    counter row in the counters' `shard`."""
    return (
        *_new_session_values(item.session),
        item.created_at,
        item.scope,
        item.key,
        item.status,
        item.body,
        shard,
        added,
    )


def counter_key(item: AnsweredSession) -> tuple[date, str, str]:
    """The counter row a new session adds to, but for its application and shard (one per batch)."""
    return (
        daily_counters.utc_day(item.created_at),
        item.session.provider_name,
        item.session.draft.amount.currency,
    )


def batch_shard(answered: Sequence[AnsweredSession]) -> int:
    """The counters' shard a batch of new sessions adds to: one for the whole batch."""
    return daily_counters.shard_of(answered[0].session.id)


_INSERT_ANSWERED = f"WITH {answered_statement(1)}"


@on_database_thread
async def insert_answered_sessions(conn: Connection, answered: Sequence[AnsweredSession]) -> None:
    """Store new PENDING sessions, each with the answer of the Idempotency-Key that created it, and
    count them in the daily counters: one round trip for them all, and all or none (asyncpg runs
    the batch as one implicit transaction)."""
    shard = batch_shard(answered)
    ordered = daily_counters.in_counter_order(answered, counter_key)
    await conn.executemany(_INSERT_ANSWERED, [answered_values(item, shard, added) for item, added in ordered])


@on_database_thread
async def get_session(conn: Connection, session_id: uuid.UUID) -> CheckoutSession | None:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM checkout_sessions WHERE id = $1", session_id)
    return checkout_session(row) if row else None


@on_database_thread
async def lock_session(conn: Connection, session_id: uuid.UUID) -> CheckoutSession | None:
    """The session, locked for update until the end of the transaction."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM checkout_sessions WHERE id = $1 FOR UPDATE", session_id
    )
    return checkout_session(row) if row else None


@on_database_thread
async def set_session_status(
    conn: Connection,
    session_id: uuid.UUID,
    status: SessionStatus,
    failure_reason: FailureReason | None,
    *,
    now: datetime,
    dispute_lost: bool = False,
) -> CheckoutSession:
    """Set the session's status and failure reason at `now`; with `dispute_lost`, also record `now`
    as when a lost dispute was reported."""
    row = await conn.fetchrow(
        f"""UPDATE checkout_sessions SET status = $2, failure_reason = $3, updated_at = $4,
                   dispute_lost_at = CASE WHEN $5 THEN $4 ELSE dispute_lost_at END
            WHERE id = $1 RETURNING {_COLUMNS}""",
        session_id,
        status,
        failure_reason,
        now,
        dispute_lost,
    )
    return checkout_session(row)


@dataclass(frozen=True)
class SessionFilter:
    """Which of an application's sessions a list holds; by default, all of them."""

    status: SessionStatus | None = None
    created_from: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive


ALL_SESSIONS = SessionFilter()


def add_conditions(
    clauses: list[str], args: list[object], conditions: Iterable[tuple[str, object | None]]
) -> None:
    """Append to `clauses` each of `conditions` whose value is given (not None), and its value to
    `args`: the condition's `${}` becomes that argument's number."""
    for condition, value in conditions:
        if value is not None:
            args.append(value)
            clauses.append(condition.format(len(args)))


def _where(application_id: uuid.UUID, where: SessionFilter) -> tuple[str, list[object]]:
    """The WHERE clause of `where` and its arguments: only the conditions asked for, so the list
    without a filter (the API's) is the same statement it always was."""
    clauses: list[str] = ["application_id = $1"]
    args: list[object] = [application_id]
    add_conditions(
        clauses,
        args,
        (
            ("status = ${}", where.status),
            ("created_at >= ${}", where.created_from),
            ("created_at < ${}", where.created_before),
        ),
    )
    return " AND ".join(clauses), args


@on_database_thread
async def count_sessions(conn: Connection, application_id: uuid.UUID) -> int:
    """How many sessions the application has: its counter, which the database keeps in the same
    transaction as the sessions themselves (migration 0013), so one primary-key read however many."""
    count = await conn.fetchval(
        "SELECT sessions FROM session_counts WHERE application_id = $1", application_id
    )
    return int(count or 0)


# A page's sessions, each with its ended attempts (a scalar subquery: evaluated for the page's rows
# only, and never by the count of a filtered list).
PAGE_COLUMNS = f"{_COLUMNS}, ({ended_attempts_of('checkout_sessions.id')}) AS ended_attempts"


def with_ended_attempts(row: Mapping[str, Any]) -> tuple[CheckoutSession, list[EndedAttempt]]:
    return checkout_session(row), ended_attempts(row["ended_attempts"])


@on_database_thread
async def list_sessions(
    conn: Connection, application_id: uuid.UUID, page: PageRequest, where: SessionFilter = ALL_SESSIONS
) -> tuple[list[tuple[CheckoutSession, list[EndedAttempt]]], int]:
    """A page of the application's sessions that `where` holds, newest first, each with its ended
    attempts (oldest first, `storage.attempts`), and how many it holds: one statement for the page.

    The total comes first: without a filter (the API's list) from the application's counter, with
    one (the console's) by counting. A page past the end is then answered without reading any
    session. Run it in `Database.snapshot` for the total and the page to agree."""
    clause, args = _where(application_id, where)
    return await read_page(
        conn,
        page,
        columns=PAGE_COLUMNS,
        rows_from=f"checkout_sessions WHERE {clause}",
        args=args,
        order_by="created_at DESC, id DESC",
        item=with_ended_attempts,
        total=await count_sessions(conn, application_id) if where == ALL_SESSIONS else None,
    )


@dataclass(frozen=True)
class SessionParticulars:
    """What a session's page shows beyond its read record."""

    shipping_minor: int
    tax_minor: int
    locale: str | None
    redirect_urls: dict[str, Any] | None
    order_items: list[dict[str, Any]] | None  # as given at create
    shipping: dict[str, Any] | None  # the shipping's type and method, as given at create


@on_database_thread
async def session_particulars(conn: Connection, session_id: uuid.UUID) -> SessionParticulars | None:
    row = await conn.fetchrow(
        f"SELECT {', '.join(SessionParticulars.__dataclass_fields__)} FROM checkout_sessions WHERE id = $1",
        session_id,
    )
    return SessionParticulars(**dict(row.items())) if row else None


_DUE_FOR_EXPIRY = due_work.fair_share(
    "checkout_sessions", f"status = '{SessionStatus.PENDING}' AND expires_at <= $7", "expires_at"
)


@on_database_thread
async def sessions_due_for_expiry(
    conn: Connection,
    limit: int,
    *,
    per_merchant: int,
    skips: due_work.Skips = due_work.NO_SKIPS,
    now: datetime,
) -> list[due_work.DueItem]:
    """PENDING sessions past their expiry, at most `limit`, a fair share per merchant
    (`storage.due_work`)."""
    return await due_work.pick(
        conn, _DUE_FOR_EXPIRY, limit=limit, per_merchant=per_merchant, skips=skips, now=now
    )


_SECONDS_UNTIL_NEXT_EXPIRY = f"""
    SELECT extract(epoch FROM min(expires_at) - $1::timestamptz) FROM checkout_sessions
    WHERE status = '{SessionStatus.PENDING}'"""


@on_database_thread
async def seconds_until_next_expiry(conn: Connection, *, now: datetime) -> float | None:
    """Seconds from `now` until the earliest PENDING session expires (<= 0 when one is due); None
    if none."""
    value = await conn.fetchval(_SECONDS_UNTIL_NEXT_EXPIRY, now)
    return float(value) if value is not None else None


@on_database_thread
async def sessions_due_for_expiry_and_next(
    conn: Connection,
    limit: int,
    *,
    per_merchant: int,
    skips: due_work.Skips = due_work.NO_SKIPS,
    now: datetime,
) -> tuple[list[due_work.DueItem], float | None]:
    """`sessions_due_for_expiry`, and `seconds_until_next_expiry` at the same `now`: the expiry
    loop's look, in one unit."""
    due = await sessions_due_for_expiry(conn, limit, per_merchant=per_merchant, skips=skips, now=now)
    return due, await seconds_until_next_expiry(conn, now=now)
