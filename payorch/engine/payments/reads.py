"""Reads of sessions as the interface shows them: a session with its refunds and attempts, and a page
of them. Each is consistent by itself: one statement, or one snapshot."""

from __future__ import annotations

import uuid

from payorch.engine.payments.records import SessionRecord, session_record
from payorch.engine.payments.refund_rules import refund_record
from payorch.engine.payments.states import WITH_REFUNDS
from payorch.storage import refunds, sessions
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.pagination import PageRequest


@on_database_thread
async def session_with_record(
    conn: Connection, session_id: uuid.UUID
) -> tuple[sessions.CheckoutSession, SessionRecord] | None:
    """The session and its read record with its refunds and attempts (one statement:
    `Database.autocommit` is enough for them to agree); None when there is no such session."""
    read = await refunds.session_with_refunds(conn, session_id)
    if read is None:
        return None
    session, found, ended = read
    shown = found if session.status in WITH_REFUNDS else []
    return session, session_record(session, [refund_record(refund) for refund in shown], ended)


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
    by_session = await refunds.refunds_of_sessions(conn, [item.id for item, _ in found])
    return [
        session_record(item, [refund_record(r) for r in by_session[item.id]], ended) for item, ended in found
    ], total
