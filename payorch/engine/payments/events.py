"""A session's state changes after creation (a payment, a decline, expiry, a dispute), as one
transaction with the webhook event each emits (transactional outbox) and the outcome learned
routing counts (its first: `storage.routing_outcomes`). Run by the commands that learn of them:
provider events and expiry."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from payorch.engine.payments.records import event_body, new_event_id, session_event_data
from payorch.engine.payments.states import SessionEvent, TransitionRefused, first_outcome, transition
from payorch.metrics import Metrics
from payorch.storage import outbox, routing_outcomes, sessions
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import SessionStatus

log = logging.getLogger("payorch.sessions")


@on_database_thread
async def apply_session_event(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    event: SessionEvent,
    metrics: Metrics,
    now: datetime,
) -> bool:
    """Apply `event` to the session in this transaction at `now`, with the webhook event it emits,
    counted in `metrics`. False when it does not apply (unknown session, or a state the event
    does not move)."""
    session = await sessions.lock_session(conn, session_id)
    if session is None or session.application_id != application_id:
        return False
    if event is SessionEvent.EXPIRED and (session.expires_at is None or session.expires_at > now):
        return False
    try:
        change = transition(SessionStatus(session.status), event)
    except TransitionRefused:
        return False
    await _record_outcome(conn, session, event, metrics, now)
    if (
        change.status == session.status
        and change.failure_reason == session.failure_reason
        and not change.dispute_lost
    ):
        return False
    updated = await sessions.set_session_status(
        conn, session_id, change.status, change.failure_reason, now=now, dispute_lost=change.dispute_lost
    )
    metrics.session_transition(session.status, updated.status)
    log.info(
        "session state changed",
        extra={
            "applicationId": str(application_id),
            "sessionId": str(session_id),
            "from": session.status,
            "to": updated.status,
        },
    )
    if change.emits:
        event_id = new_event_id()
        await outbox.add_event(
            conn,
            event_id=event_id,
            application_id=application_id,
            session_id=session_id,
            event_type=change.emits,
            payload=event_body(
                event_id, change.emits, updated.updated_at, application_id, session_event_data(updated)
            ),
        )
    return True


@on_database_thread
async def _record_outcome(
    conn: Connection, session: sessions.CheckoutSession, event: SessionEvent, metrics: Metrics, now: datetime
) -> None:
    """The session's outcome at its provider, for learned routing, if `event` gives one and the
    session has none yet (a decline is one though the session stays PENDING; a late payment after
    expiry is not: the abandonment came first)."""
    found = first_outcome(event)
    if found is None or session.provider_name is None:
        return
    recorded = await routing_outcomes.record_outcome(
        conn,
        application_id=session.application_id,
        session_id=session.id,
        provider=session.provider_name,
        payment_method=session.payment_method,
        currency=session.currency,
        outcome=found,
        now=now,
    )
    if recorded:
        metrics.routing_outcome(session.provider_name, session.payment_method, found.name.lower())
