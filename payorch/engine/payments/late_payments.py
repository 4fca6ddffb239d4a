"""A provider's event about a payment attempt that has ended: its session's row holds the next
attempt now, and the event names the ended attempt's checkout (`storage.attempts`).

Applied under the session's row lock, in the event's transaction:

- paid, the session still PENDING (a late success, after the next attempt opened): the session
  becomes SUCCEEDED through that attempt, which says SUCCEEDED, with one `session.completed`; the
  caller then closes the open attempt's checkout at its provider (`LateOutcome.close`), so that
  nobody pays it any more;
- paid, the session already paid through another attempt (a provider's race): the session stays
  as it is, and the attempt's payment is refunded in full by payorch
  (`engine.payments.refunds.refund_duplicate_payment`), the attempt DUPLICATE_REFUNDED;
- a dispute lost on the attempt that paid the session: the session's, as for its open attempt;
- anything else (a decline or an expiry of a checkout already ended) changes nothing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from payorch.engine.context import Context
from payorch.engine.payments.events import apply_session_event
from payorch.engine.payments.refunds import refund_duplicate_payment
from payorch.engine.payments.states import PAID, SessionEvent
from payorch.metrics import Metrics
from payorch.providers.base import CheckoutClosed
from payorch.storage import attempts, provider_configs, sessions
from payorch.storage.attempts import EndedAttempt
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.sessions import CheckoutSession
from payorch.values.statuses import AttemptStatus

log = logging.getLogger("payorch.late_payments")


@dataclass(frozen=True)
class LateOutcome:
    """What an event about an ended attempt changed: `applied`, and the session whose open
    attempt's checkout is to be closed at its provider now (a late success completed it)."""

    applied: bool
    close: CheckoutSession | None = None


UNCHANGED = LateOutcome(applied=False)


@on_database_thread
async def apply_to_ended_attempt(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    attempt: EndedAttempt,
    event: SessionEvent,
    metrics: Metrics,
    now: datetime,
) -> LateOutcome:
    """Apply the provider's `event` about the ended `attempt` as the module's docstring says, in
    this transaction at `now`."""
    session = await sessions.lock_session(conn, attempt.session_id)
    if session is None or session.application_id != application_id:
        return UNCHANGED
    # Read again under the lock: another event of the attempt may have been applied meanwhile.
    locked = await attempts.ended_attempt_of_checkout(conn, attempt.provider_name, attempt.provider_reference)
    if locked is None:
        return UNCHANGED
    if event is SessionEvent.DISPUTE_LOST:
        if locked.status is not AttemptStatus.SUCCEEDED:
            return UNCHANGED
        return LateOutcome(
            await apply_session_event(
                conn,
                application_id=application_id,
                session_id=session.id,
                event=event,
                attempt=locked,
                metrics=metrics,
                now=now,
            )
        )
    if event is not SessionEvent.PAYMENT_SUCCEEDED or locked.status in _PAID_ATTEMPT:
        return UNCHANGED
    if session.status in PAID:
        await refund_duplicate_payment(conn, session=session, attempt=locked, metrics=metrics, now=now)
        metrics.duplicate_payment_refunded()
        return LateOutcome(applied=True)
    if not await apply_session_event(
        conn, application_id=application_id, session_id=session.id, event=event, metrics=metrics, now=now
    ):
        return UNCHANGED
    await attempts.set_attempt_status(conn, locked.id, AttemptStatus.SUCCEEDED)
    return LateOutcome(applied=True, close=session)


_PAID_ATTEMPT = frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.DUPLICATE_REFUNDED})


async def close_checkout_of(context: Context, session: CheckoutSession) -> None:
    """Close the checkout of the session's open attempt at its provider, once a late success of an
    ended attempt paid the session: nobody pays it any more. A provider failure is raised."""
    name, reference = session.provider_name, session.provider_reference
    provider = context.providers.get(name) if name is not None else None
    if name is None or provider is None or reference is None:
        return
    config = await context.db.autocommit(provider_configs.get_provider_config, session.application_id, name)
    if config is None:
        return
    with context.provider_call(config, "close_checkout", context.settings.engine.provider_timeout_s):
        closed = await provider.close_checkout(context.credentials(config), reference)
    if closed is CheckoutClosed.PAID:
        # Both attempts paid, the later one being the session's open attempt: not refunded by
        # payorch yet (only an ended attempt's duplicate payment is).
        log.error(
            "the open attempt's checkout was paid too after a late payment completed its session",
            extra={"applicationId": str(session.application_id), "sessionId": str(session.id)},
        )
