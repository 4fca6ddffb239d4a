"""A session's state changes after creation (a payment, a decline, expiry, a dispute), as one
transaction with the webhook event each emits (transactional outbox), the outcome learned routing
counts for the payment attempt the event is about (`storage.routing_outcomes`: its final outcome,
whatever order its events arrive in), the daily figures (`storage.daily_counters`) and the attempt
metrics. Run by the commands that learn of them: provider events and expiry."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from payorch.engine.payments.records import event_body, new_event_id, session_event_data
from payorch.engine.payments.states import PAID, SessionEvent, TransitionRefused, first_outcome, transition
from payorch.metrics import Metrics
from payorch.storage import daily_counters, outbox, routing_outcomes, sessions
from payorch.storage.attempts import EndedAttempt
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
    attempt: EndedAttempt | None = None,
) -> bool:
    """Apply `event` to the session in this transaction at `now`, with the webhook event it emits,
    counted in `metrics`; `attempt` is the ended attempt the event is about, None for the session's
    open one. False when it does not apply (unknown session, or a state the event does not move)."""
    session = await sessions.lock_session(conn, session_id)
    if session is None or session.application_id != application_id:
        return False
    if event is SessionEvent.EXPIRED and (session.expires_at is None or session.expires_at > now):
        return False
    try:
        change = transition(SessionStatus(session.status), event)
    except TransitionRefused:
        if event in _VERDICTS:  # a decline after expiry, a payment applied again: still its attempt's
            await record_verdict(conn, session, attempt, event, metrics, now)
        return False
    recorded = await record_verdict(conn, session, attempt, event, metrics, now)
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
    await _count_paid(conn, session, updated, attempt, now)
    if recorded is not None:
        _count_attempt(session, updated, attempt, recorded, metrics)
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


# The provider's verdicts on an attempt: they count for its outcome whatever the session's state.
_VERDICTS = frozenset({SessionEvent.PAYMENT_SUCCEEDED, SessionEvent.PAYMENT_DECLINED})


@on_database_thread
async def record_verdict(
    conn: Connection,
    session: sessions.CheckoutSession,
    attempt: EndedAttempt | None,
    event: SessionEvent,
    metrics: Metrics,
    now: datetime,
) -> routing_outcomes.AttemptOutcome | None:
    """Record what `event` says of the attempt it is about (`attempt`, or the session's open one)
    at that attempt's provider, for learned routing: the attempt's outcome as it now stands; None
    when the event gives none. The attempt's outcome is its final one whatever the order
    (`storage.routing_outcomes`): paid at any time, a success (a decline before or after at the
    same checkout, or an expiry before a late payment, changes nothing); else declined, a failure;
    else an abandonment."""
    found = first_outcome(event)
    provider = session.provider_name if attempt is None else attempt.provider_name
    if found is None or provider is None:
        return None
    recorded = await routing_outcomes.record_outcome(
        conn,
        application_id=session.application_id,
        session_id=session.id,
        provider=provider,
        payment_method=session.payment_method,
        currency=session.currency,
        outcome=found,
        now=now,
        attempt_number=None if attempt is None else attempt.number,
    )
    if recorded.written:
        metrics.routing_outcome(provider, session.payment_method, recorded.outcome.name.lower())
    if event is SessionEvent.PAYMENT_DECLINED:
        # Each decline the provider reports (its event applied once) is one declined try, even at
        # a checkout the customer then pays: the daily figures count tries, not sessions.
        await daily_counters.count_declined(
            conn,
            application_id=session.application_id,
            session_id=session.id,
            provider=provider,
            currency=session.currency,
            now=now,
        )
    return recorded


@on_database_thread
async def _count_paid(
    conn: Connection,
    before: sessions.CheckoutSession,
    after: sessions.CheckoutSession,
    attempt: EndedAttempt | None,
    now: datetime,
) -> None:
    """Count the session approved in the daily figures when this change paid it: a session reaches
    SUCCEEDED from an unpaid state once, so a success reported twice counts once."""
    if after.status != SessionStatus.SUCCEEDED or before.status in PAID:
        return
    provider = before.provider_name if attempt is None else attempt.provider_name
    if provider is None:
        return
    await daily_counters.count_approved(
        conn,
        application_id=before.application_id,
        session_id=before.id,
        provider=provider,
        currency=before.currency,
        amount_minor=before.amount_minor,
        now=now,
    )


def _count_attempt(
    before: sessions.CheckoutSession,
    after: sessions.CheckoutSession,
    attempt: EndedAttempt | None,
    recorded: routing_outcomes.AttemptOutcome,
    metrics: Metrics,
) -> None:
    """Count in `metrics` the session's open attempt ending with it (paid, or expired with its
    last verdict), and the session recovered when an attempt after its first paid it. An ended
    attempt was counted when it ended (`engine.payments.recovery`)."""
    ended = before.status == SessionStatus.PENDING and after.status != SessionStatus.PENDING
    if ended and attempt is None and before.provider_name is not None:
        metrics.payment_attempt_ended(before.provider_name, recorded.outcome.name.lower())
    if after.status == SessionStatus.SUCCEEDED and recorded.number > 1:
        metrics.session_recovered()
