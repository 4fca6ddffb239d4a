"""A merchant's sessions across its applications, searched and read in keyset pages (migration 0035).

Every read is of one merchant's rows (`merchant_id`, which the database copies from the session's
application), newest first (`created_at DESC, id DESC`), and starts after a key: the last session of
the page before, or the top of the list. Each filter is an equality (or a range) ahead of that
order in one of the merchant's indexes, so a page is an index range scan that reads its own rows
and no others: the thousandth page costs what the first does, and nothing is ever counted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from payorch.storage.attempts import EndedAttempt
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.sessions import (
    PAGE_COLUMNS,
    CheckoutSession,
    add_conditions,
    checkout_session,
    with_ended_attempts,
)
from payorch.values.statuses import SessionStatus

# The key of a session in the list's order; a page starts after one.
SessionKey = tuple[datetime, uuid.UUID]


@dataclass(frozen=True)
class SessionSearch:
    """Which of a merchant's sessions a search holds: every filter given must hold (None: any)."""

    merchant_id: uuid.UUID
    application_id: uuid.UUID | None = None
    order_reference: str | None = None  # exactly
    customer_email: str | None = None  # the customer's e-mail given at create, in any case
    currency: str | None = None
    amount_min_minor: int | None = None  # inclusive, in `currency`'s minor units
    amount_max_minor: int | None = None  # inclusive
    provider: str | None = None  # of the session's current attempt
    status: SessionStatus | None = None
    created_from: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive


def _where(search: SessionSearch, after: SessionKey | None) -> tuple[str, list[object]]:
    """The WHERE clause of `search` from after `after`, and its arguments: only the conditions asked
    for, each written as the index of migration 0035 has it."""
    clauses = ["merchant_id = $1"]
    args: list[object] = [search.merchant_id]
    add_conditions(
        clauses,
        args,
        (
            ("application_id = ${}", search.application_id),
            ("order_reference = ${}", search.order_reference),
            ("lower(customer ->> 'email') = lower(${})", search.customer_email),
            ("currency = ${}", search.currency),
            ("amount_minor >= ${}", search.amount_min_minor),
            ("amount_minor <= ${}", search.amount_max_minor),
            ("provider_name = ${}", search.provider),
            ("status = ${}", search.status),
            ("created_at >= ${}", search.created_from),
            ("created_at < ${}", search.created_before),
        ),
    )
    if after is not None:
        args.extend(after)
        clauses.append(f"(created_at, id) < (${len(args) - 1}, ${len(args)})")
    return " AND ".join(clauses), args


def search_statement(
    columns: str, search: SessionSearch, after: SessionKey | None, limit: int
) -> tuple[str, list[object]]:
    """The statement reading `columns` of up to `limit` sessions `search` holds after `after`, in
    the list's order, and its arguments (the bench explains it)."""
    clause, args = _where(search, after)
    args.append(limit)
    statement = f"""SELECT {columns} FROM checkout_sessions WHERE {clause}
                    ORDER BY created_at DESC, id DESC LIMIT ${len(args)}"""
    return statement, args


@on_database_thread
async def search_sessions(
    conn: Connection, search: SessionSearch, after: SessionKey | None, limit: int
) -> list[tuple[CheckoutSession, list[EndedAttempt]]]:
    """Up to `limit` sessions `search` holds after the key `after` (None: from the newest), newest
    first, each with its ended attempts (oldest first): one statement."""
    statement, args = search_statement(PAGE_COLUMNS, search, after, limit)
    return [with_ended_attempts(row) for row in await conn.fetch(statement, *args)]


_EXPORT_COLUMNS = ", ".join(CheckoutSession.__dataclass_fields__)


@on_database_thread
async def export_batch(
    conn: Connection, search: SessionSearch, after: SessionKey | None, limit: int
) -> list[CheckoutSession]:
    """Up to `limit` sessions `search` holds after `after`, newest first, without their attempts:
    one batch of an export."""
    statement, args = search_statement(_EXPORT_COLUMNS, search, after, limit)
    return [checkout_session(row) for row in await conn.fetch(statement, *args)]
