"""Reads of sessions as the interface shows them: a session with its refunds and attempts, a page
of an application's, and a keyset page of a merchant's across its applications. Each is consistent
by itself: one statement, or one snapshot."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from payorch.engine.payments.records import ListedSession, SessionRecord, session_record
from payorch.engine.payments.refund_rules import refund_record
from payorch.engine.payments.states import WITH_REFUNDS
from payorch.storage import refunds, session_search, sessions
from payorch.storage.attempts import EndedAttempt
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.pagination import PageRequest


@on_database_thread
async def session_with_record(
    conn: Connection, session_id: uuid.UUID
) -> tuple[sessions.CheckoutSession, SessionRecord] | None:
    """The session and its read record with its refunds and attempts (one statement:
    `Database.autocommit` is enough for them to agree); None when there is no such session."""
    return _with_record(await refunds.session_with_refunds(conn, session_id))


@on_database_thread
async def sessions_with_records(
    conn: Connection, session_ids: Sequence[uuid.UUID]
) -> list[tuple[sessions.CheckoutSession, SessionRecord] | None]:
    """What `session_with_record` answers for each of `session_ids`, in their order, read in one
    statement (several callers' reads at once: `Database.reads_together`)."""
    return [_with_record(read) for read in await refunds.sessions_with_refunds(conn, session_ids)]


def _with_record(
    read: tuple[sessions.CheckoutSession, list[refunds.Refund], list[EndedAttempt]] | None,
) -> tuple[sessions.CheckoutSession, SessionRecord] | None:
    if read is None:
        return None
    session, found, ended = read
    shown = found if session.status in WITH_REFUNDS else []
    return session, session_record(session, [refund_record(refund) for refund in shown], ended)


@on_database_thread
async def _records(
    conn: Connection, found: Sequence[tuple[sessions.CheckoutSession, list[EndedAttempt]]]
) -> list[SessionRecord]:
    """The read records of the sessions `found` (each with its ended attempts), their refunds read
    in one statement."""
    by_session = await refunds.refunds_of_sessions(conn, [item.id for item, _ in found])
    return [
        session_record(item, [refund_record(r) for r in by_session[item.id]], ended) for item, ended in found
    ]


@on_database_thread
async def session_page(
    conn: Connection,
    application_id: uuid.UUID,
    page: PageRequest,
    where: sessions.SessionFilter = sessions.ALL_SESSIONS,
) -> tuple[list[SessionRecord], int]:
    """A page of the application's session records that `where` holds (all by default), with their
    refunds and attempts (the attempts read with the page's sessions). Run it in `Database.snapshot`,
    so the sessions and their refunds are read as of one moment."""
    found, total = await sessions.list_sessions(conn, application_id, page, where)
    return await _records(conn, found), total


@on_database_thread
async def searched_sessions(
    conn: Connection,
    search: session_search.SessionSearch,
    after: session_search.SessionKey | None,
    limit: int,
) -> list[tuple[session_search.SessionKey, ListedSession]]:
    """Up to `limit` records of the merchant's sessions that `search` holds after the key `after`,
    newest first, each naming its application, with its key (where a page after it starts). Run it
    in `Database.snapshot`, so the sessions and their refunds are read as of one moment."""
    found = await session_search.search_sessions(conn, search, after, limit)
    records = await _records(conn, found)
    return [
        ((item.created_at, item.id), {**record, "applicationId": str(item.application_id)})
        for record, (item, _) in zip(records, found, strict=True)
    ]
