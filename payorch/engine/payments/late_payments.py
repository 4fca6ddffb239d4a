"""A provider's event about a payment attempt that has ended: its session's row holds the next
attempt now, and the event names the ended attempt's checkout (`storage.attempts`).

Applied under the session's row lock, in the event's transaction:

- paid, the session still PENDING (a late success, after the next attempt opened): the session
  becomes SUCCEEDED through that attempt, which says SUCCEEDED, with one `session.completed`; the
  caller then closes the open attempt's checkout at its provider (`LateOutcome.close`,
  `close_checkout_of`), so that nobody pays it any more;
- paid, the session already paid through another attempt (a provider's race): the session stays
  as it is, and the attempt's payment is refunded in full by payorch
  (`engine.payments.refunds.refund_duplicate_payment`), the attempt DUPLICATE_REFUNDED;
- a dispute lost on the attempt that paid the session: the session's, as for its open attempt;
- anything else (a decline or an expiry of a checkout already ended) changes nothing but the
  attempt's outcome for learned routing: a payment or a decline of an ended attempt counts for
  that attempt at its provider (`engine.payments.events.record_verdict`), whatever came before.

The attempt that was open when a late success paid its session may have been paid too before its
checkout closed: its provider then answers the closing with `PAID` (`settle_closed_checkout`), or,
when the closing failed and the customer paid before the checkout expired, its own payment event
arrives about the session's open checkout (`apply_to_paid_session`). Either way
`refund_open_attempt_paid_too` ends that attempt as DUPLICATE_REFUNDED (written to
`payment_attempts`, its checkout still the session row's) and refunds its payment in full, exactly
as for an ended attempt's duplicate, once; its later events are then that ended attempt's.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

import outcome

from payorch.engine.context import Context
from payorch.engine.payments.events import apply_session_event, record_verdict
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
        # A decline of an ended attempt still counts for its outcome (a cancel then a decline
        # is the decline's failure, as the other way round).
        await record_verdict(conn, session, locked, event, metrics, now)
        return UNCHANGED
    if session.status in PAID:
        await record_verdict(conn, session, locked, event, metrics, now)
        await _refund_duplicate(conn, session, locked, metrics, now)
        return LateOutcome(applied=True)
    if not await apply_session_event(
        conn,
        application_id=application_id,
        session_id=session.id,
        event=event,
        metrics=metrics,
        now=now,
        attempt=locked,  # the payment is this attempt's outcome, not the open one's
    ):
        return UNCHANGED
    await attempts.set_attempt_status(conn, locked.id, AttemptStatus.SUCCEEDED)
    return LateOutcome(applied=True, close=session)


_PAID_ATTEMPT = frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.DUPLICATE_REFUNDED})


@on_database_thread
async def refund_open_attempt_paid_too(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    checkout: str,
    metrics: Metrics,
    now: datetime,
) -> bool:
    """The session's open attempt, whose checkout is `checkout`, was paid after a late success of
    an ended attempt paid the session: end it as DUPLICATE_REFUNDED and refund its payment in full,
    in this transaction at `now`. False, changing nothing, unless the session is
    `application_id`'s, paid through an ended attempt, its open checkout is `checkout`, and that
    attempt has not ended yet (so a second report of the same payment refunds nothing more)."""
    session = await sessions.lock_session(conn, session_id)
    if (
        session is None
        or session.application_id != application_id
        or session.status not in PAID
        or session.provider_name is None
        or session.provider_reference != checkout
    ):
        return False
    ended = await attempts.attempts_of_session(conn, session.id)
    if not any(attempt.status is AttemptStatus.SUCCEEDED for attempt in ended):
        return False  # the open attempt is the one that paid the session
    if any(attempt.provider_reference == checkout for attempt in ended):
        return False  # ended already: refunded once
    attempt = EndedAttempt(
        id=uuid.uuid4(),
        session_id=session.id,
        application_id=session.application_id,
        number=len(ended) + 1,
        provider_name=session.provider_name,
        provider_reference=checkout,
        status=AttemptStatus.SUCCEEDED,  # paid; the refund marks it DUPLICATE_REFUNDED
        failure_reason=None,
        provider_code=None,
        routing_reason=session.routing_reason,
        created_at=ended[-1].ended_at,
        ended_at=now,
    )
    await attempts.insert_ended_attempt(conn, attempt)
    await record_verdict(conn, session, attempt, SessionEvent.PAYMENT_SUCCEEDED, metrics, now)
    await _refund_duplicate(conn, session, attempt, metrics, now)
    return True


@on_database_thread
async def apply_to_paid_session(
    conn: Connection,
    *,
    session: CheckoutSession,
    event: SessionEvent,
    checkout: str | None,
    metrics: Metrics,
    now: datetime,
) -> LateOutcome | None:
    """The provider's `event` about the open attempt's checkout (`checkout`, when the event names
    it) of a session already paid, in this transaction at `now`: the ended attempt's when that
    checkout has ended (paid too, refunded: a dispute of it reverses nothing), a payment refunded
    by `refund_open_attempt_paid_too` when it is one; None when it is the session's own event, to
    be applied as any other."""
    if session.provider_name is None or session.provider_reference is None:
        return None
    ended = await attempts.ended_attempt_of_checkout(conn, session.provider_name, session.provider_reference)
    if ended is not None and ended.session_id == session.id:
        return await apply_to_ended_attempt(
            conn, application_id=session.application_id, attempt=ended, event=event, metrics=metrics, now=now
        )
    if event is SessionEvent.PAYMENT_SUCCEEDED and checkout is not None:
        refunded = await refund_open_attempt_paid_too(
            conn,
            application_id=session.application_id,
            session_id=session.id,
            checkout=checkout,
            metrics=metrics,
            now=now,
        )
        if refunded:
            return LateOutcome(applied=True)
    return None


@on_database_thread
async def _refund_duplicate(
    conn: Connection, session: CheckoutSession, attempt: EndedAttempt, metrics: Metrics, now: datetime
) -> None:
    await refund_duplicate_payment(conn, session=session, attempt=attempt, metrics=metrics, now=now)
    metrics.duplicate_payment_refunded()


async def close_checkout_of(context: Context, session: CheckoutSession) -> CheckoutClosed | None:
    """Close the checkout of the session's open attempt at its provider, once a late success of an
    ended attempt paid the session: nobody pays it any more. What the provider answers (`PAID`: the
    customer paid it first); None when there is nothing to close. A provider failure is raised."""
    name, reference = session.provider_name, session.provider_reference
    provider = context.providers.get(name) if name is not None else None
    if name is None or provider is None or reference is None:
        return None
    config = await context.db.autocommit(provider_configs.get_provider_config, session.application_id, name)
    if config is None:
        return None
    with context.provider_call(config, "close_checkout", context.settings.engine.provider_timeout_s):
        return await provider.close_checkout(context.credentials(config), reference)


async def settle_closed_checkout(
    context: Context, session: CheckoutSession, closed: outcome.Outcome[CheckoutClosed | None]
) -> None:
    """What `close_checkout_of` found, back in the session's lane: a checkout paid too is refunded
    in full (`refund_open_attempt_paid_too`); a closing that failed is logged, the checkout then
    expiring at its provider (a payment before then is refunded when its event arrives)."""
    if isinstance(closed, outcome.Error):
        log.warning(
            "could not close the open attempt's checkout after a late payment; it expires",
            extra={"sessionId": str(session.id), "error": repr(closed.error)},
        )
        return
    if closed.unwrap() is not CheckoutClosed.PAID or session.provider_reference is None:
        return
    await context.db.transaction(
        refund_open_attempt_paid_too,
        application_id=session.application_id,
        session_id=session.id,
        checkout=session.provider_reference,
        metrics=context.metrics,
        now=context.clock.now(),
    )
