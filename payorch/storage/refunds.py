"""Refunds."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payorch.storage import due_work
from payorch.storage.attempts import EndedAttempt, ended_attempts, ended_attempts_of
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.pages import items_of
from payorch.storage.sessions import CheckoutSession, checkout_session
from payorch.values.statuses import FailureReason, RefundStatus


@dataclass(frozen=True)
class Refund:
    id: uuid.UUID
    session_id: uuid.UUID
    application_id: uuid.UUID
    amount_minor: int
    currency: str
    status: RefundStatus
    failure_reason: FailureReason | None
    reason: str | None
    line_items: list[dict[str, Any]] | None
    provider_name: str
    provider_reference: str | None
    submit_attempts: int
    next_submit_at: datetime | None
    created_at: datetime
    updated_at: datetime


_COLUMNS = ", ".join(Refund.__dataclass_fields__)


def _refund(row: Mapping[str, Any], prefix: str = "") -> Refund:
    """The refund of a row that holds `Refund`'s columns, their names after `prefix`."""
    values = {name: row[f"{prefix}{name}"] for name in Refund.__dataclass_fields__}
    values["status"] = RefundStatus(values["status"])
    if values["failure_reason"] is not None:
        values["failure_reason"] = FailureReason(values["failure_reason"])
    return Refund(**values)


# An attempt's duplicate payment refunded by payorch (`payment_attempts.refund_id`) is not the
# session's payment: its refund never counts against the session's balance.
_REFUNDED_MINOR = f"""
    SELECT coalesce(sum(amount_minor), 0) FROM refunds r
    WHERE r.session_id = $1 AND r.status <> '{RefundStatus.FAILED}'
      AND NOT EXISTS (SELECT FROM payment_attempts a WHERE a.refund_id = r.id)"""


@on_database_thread
async def refunded_minor(conn: Connection, session_id: uuid.UUID) -> int:
    """The sum of the session's refunds that are not FAILED."""
    return int(await conn.fetchval(_REFUNDED_MINOR, session_id))


@on_database_thread
async def insert_refund(
    conn: Connection,
    *,
    refund_id: uuid.UUID,
    session_id: uuid.UUID,
    application_id: uuid.UUID,
    amount_minor: int,
    currency: str,
    reason: str | None,
    line_items: list[dict[str, Any]] | None,
    provider_name: str,
    first_submission_grace_s: float,
    owner: int | None,
    now: datetime,
) -> Refund:
    """A PENDING refund whose first submission the node `owner` makes: the supervisors leave it alone
    for `first_submission_grace_s`, unless that node is gone first (`storage.claim_takeover`)."""
    row = await conn.fetchrow(
        f"""INSERT INTO refunds (id, session_id, application_id, amount_minor, currency, status, reason,
                                 line_items, provider_name, next_submit_at, submit_claimed_by, created_at,
                                 updated_at)
            VALUES ($1, $2, $3, $4, $5, '{RefundStatus.PENDING}', $6, $7, $8,
                    $11::timestamptz + make_interval(secs => $9), $10, $11, $11)
            RETURNING {_COLUMNS}""",
        refund_id,
        session_id,
        application_id,
        amount_minor,
        currency,
        reason,
        line_items,
        provider_name,
        float(first_submission_grace_s),
        owner,
        now,
    )
    return _refund(row)


@on_database_thread
async def get_refund(conn: Connection, refund_id: uuid.UUID) -> Refund | None:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM refunds WHERE id = $1", refund_id)
    return _refund(row) if row else None


@on_database_thread
async def lock_refund(conn: Connection, refund_id: uuid.UUID) -> Refund | None:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM refunds WHERE id = $1 FOR UPDATE", refund_id)
    return _refund(row) if row else None


# A session's columns and its refunds' (prefixed `r_`), for one statement that reads both.
_SESSION_THEN_REFUND_COLUMNS = ", ".join(
    [f"s.{name}" for name in CheckoutSession.__dataclass_fields__]
    + [f"r.{name} AS r_{name}" for name in Refund.__dataclass_fields__]
)


@on_database_thread
async def session_with_refunds(
    conn: Connection, session_id: uuid.UUID
) -> tuple[CheckoutSession, list[Refund], list[EndedAttempt]] | None:
    """The session, its refunds and its ended attempts, oldest first, in one statement: one round
    trip, and one snapshot, so the refunds and attempts are never from before or after the session's
    status. None when there is no such session."""
    (read,) = await sessions_with_refunds(conn, [session_id])
    return read


_SESSIONS_WITH_REFUNDS = f"""
    SELECT {_SESSION_THEN_REFUND_COLUMNS}, ended.attempts AS ended_attempts
    FROM checkout_sessions s
    LEFT JOIN LATERAL ({ended_attempts_of("s.id")}) ended (attempts) ON true
    LEFT JOIN refunds r ON r.session_id = s.id
    WHERE s.id = ANY($1::uuid[]) ORDER BY r.created_at, r.id"""


@on_database_thread
async def sessions_with_refunds(
    conn: Connection, session_ids: Sequence[uuid.UUID]
) -> list[tuple[CheckoutSession, list[Refund], list[EndedAttempt]] | None]:
    """What `session_with_refunds` reads of each of `session_ids`, in their order, in one
    statement."""
    rows = await conn.fetch(_SESSIONS_WITH_REFUNDS, list(session_ids))
    by_session: dict[uuid.UUID, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_session.setdefault(row["id"], []).append(row)
    found: list[tuple[CheckoutSession, list[Refund], list[EndedAttempt]] | None] = []
    for session_id in session_ids:
        its = by_session.get(session_id)
        if its is None:
            found.append(None)
            continue
        refunds = [_refund(row, prefix="r_") for row in its if row["r_id"] is not None]
        found.append((checkout_session(its[0]), refunds, ended_attempts(its[0]["ended_attempts"])))
    return found


_REFUNDS_OF_SESSIONS = (
    f"SELECT {_COLUMNS} FROM refunds WHERE session_id = ANY($1::uuid[]) ORDER BY created_at, id"
)


@on_database_thread
async def refunds_of_sessions(
    conn: Connection, session_ids: list[uuid.UUID]
) -> dict[uuid.UUID, list[Refund]]:
    """The refunds of each session, oldest first; an empty page (past the end) reads nothing more."""
    return await items_of(conn, _REFUNDS_OF_SESSIONS, session_ids, owner="session_id", item=_refund)


@on_database_thread
async def mark_submitted(
    conn: Connection, refund_id: uuid.UUID, provider_reference: str, *, now: datetime
) -> None:
    await conn.execute(
        """UPDATE refunds SET provider_reference = $2, next_submit_at = NULL, submit_claimed_by = NULL,
               submit_attempts = submit_attempts + 1, updated_at = $3
           WHERE id = $1 AND provider_reference IS NULL""",
        refund_id,
        provider_reference,
        now,
    )


@on_database_thread
async def schedule_submission(
    conn: Connection, refund_id: uuid.UUID, delay_s: float, *, now: datetime
) -> None:
    await conn.execute(
        """UPDATE refunds SET submit_attempts = submit_attempts + 1, submit_claimed_by = NULL,
               next_submit_at = $3::timestamptz + make_interval(secs => $2), updated_at = $3
           WHERE id = $1 AND provider_reference IS NULL""",
        refund_id,
        float(delay_s),
        now,
    )


@on_database_thread
async def set_refund_outcome(
    conn: Connection,
    refund_id: uuid.UUID,
    status: RefundStatus,
    failure_reason: FailureReason | None,
    *,
    now: datetime,
) -> Refund:
    row = await conn.fetchrow(
        f"""UPDATE refunds SET status = $2, failure_reason = $3, next_submit_at = NULL,
                   submit_claimed_by = NULL, updated_at = $4
            WHERE id = $1 RETURNING {_COLUMNS}""",
        refund_id,
        status,
        failure_reason,
        now,
    )
    return _refund(row)


_DUE_TO_SUBMIT = due_work.fair_share(
    "refunds",
    f"provider_reference IS NULL AND status = '{RefundStatus.PENDING}' AND next_submit_at <= $7",
    "next_submit_at",
    lock=True,
)
_CLAIM_DUE = f"""
    WITH picked AS ({_DUE_TO_SUBMIT})
    UPDATE refunds r
       SET next_submit_at = $7::timestamptz + make_interval(secs => $8), submit_claimed_by = $9
      FROM picked WHERE r.id = picked.id
    RETURNING r.id, r.application_id, picked.merchant_id"""


@on_database_thread
async def claim_due_submissions(
    conn: Connection,
    limit: int,
    lease_s: float,
    owner: int | None,
    *,
    per_merchant: int,
    skips: due_work.Skips = due_work.NO_SKIPS,
    now: datetime,
) -> list[due_work.DueItem]:
    """Refunds due for another submission, at most `limit`, a fair share per merchant
    (`storage.due_work`), claimed by the node `owner` for `lease_s` (FOR UPDATE SKIP LOCKED, so two
    processes never take the same one; the claim of a process that died is released as soon as
    another sees it gone, `storage.claim_takeover`, or at the lease's end)."""
    return await due_work.pick(
        conn,
        _CLAIM_DUE,
        float(lease_s),
        owner,
        limit=limit,
        per_merchant=per_merchant,
        skips=skips,
        now=now,
    )


_RELEASE_SUBMISSION_CLAIMS = f"""
    UPDATE refunds SET next_submit_at = $2, submit_claimed_by = NULL
    WHERE id = ANY($1::uuid[]) AND provider_reference IS NULL AND status = '{RefundStatus.PENDING}'"""


@on_database_thread
async def release_submission_claims(conn: Connection, refund_ids: list[uuid.UUID], *, now: datetime) -> None:
    """Hand claimed submissions back: due again now."""
    await conn.execute(_RELEASE_SUBMISSION_CLAIMS, refund_ids, now)
