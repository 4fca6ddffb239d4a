"""Applying a provider's verified event: once per (provider, application, event id), in one
transaction with the state change and the webhook event it emits. An event about the session's
open attempt is the session's; one about an attempt that has ended (its checkout found in
`payment_attempts`) is that attempt's (`engine.payments.late_payments`). A payment's success that
names the provider's id of the payment (Stripe's PaymentIntent) keeps it with its checkout
(`storage.payment_references`), for reconciliation."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime

import outcome

from payorch.engine.actors import APPLICATION_LANE, ApplicationActor, Reply, refund_lane, session_lane
from payorch.engine.context import Context
from payorch.engine.payments.events import apply_session_event
from payorch.engine.payments.late_payments import (
    UNCHANGED,
    LateOutcome,
    apply_to_ended_attempt,
    apply_to_paid_session,
    close_checkout_of,
    settle_closed_checkout,
)
from payorch.engine.payments.refunds import apply_refund_outcome
from payorch.engine.payments.states import PAID, SessionEvent
from payorch.metrics import Metrics
from payorch.providers.base import CheckoutClosed, EventKind, ProviderEvent
from payorch.storage import attempts, payment_references, provider_events_seen, sessions
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread

log = logging.getLogger("payorch.provider_events")

_SESSION_EVENTS = {
    EventKind.PAYMENT_SUCCEEDED: SessionEvent.PAYMENT_SUCCEEDED,
    EventKind.PAYMENT_DECLINED: SessionEvent.PAYMENT_DECLINED,
    EventKind.CHECKOUT_EXPIRED: SessionEvent.EXPIRED,
    EventKind.DISPUTE_LOST: SessionEvent.DISPUTE_LOST,
}


@dataclass(frozen=True)
class ApplyProviderEvent:
    """A verified provider event: applied once, however often the provider delivers it."""

    provider: str
    event: ProviderEvent

    @property
    def lane(self) -> Hashable:
        """The lane of the session (or refund) the event is about."""
        if self.event.session_id is not None:
            return session_lane(self.event.session_id)
        if self.event.refund_id is not None:
            return refund_lane(self.event.refund_id)
        return APPLICATION_LANE

    async def run(self, actor: ApplicationActor[Context], reply: Reply[bool]) -> None:
        context: Context = actor.context
        result = await context.db.transaction(
            self._apply, actor.application_id, context.metrics, context.clock.now()
        )
        if result.close is None:
            reply.send(result.applied)
            return
        session = result.close

        async def close_open_checkout() -> CheckoutClosed | None:
            return await close_checkout_of(context, session)

        async def then(closed: outcome.Outcome[CheckoutClosed | None]) -> None:
            await settle_closed_checkout(context, session, closed)
            reply.send(result.applied)

        actor.spawn(close_open_checkout, then, reply)

    @on_database_thread
    async def _apply(
        self, conn: Connection, application_id: uuid.UUID, metrics: Metrics, now: datetime
    ) -> LateOutcome:
        if not await provider_events_seen.first_sighting(conn, self.provider, application_id, self.event.id):
            return UNCHANGED
        event = self.event
        if event.kind is EventKind.PAYMENT_SUCCEEDED and event.checkout_reference and event.payment_reference:
            # The payment's own id, where the provider's differs from its checkout's (Stripe's
            # PaymentIntent): reconciliation matches the provider's settled items by it.
            await payment_references.record_payment_reference(
                conn,
                application_id=application_id,
                provider=self.provider,
                checkout_reference=event.checkout_reference,
                payment_reference=event.payment_reference,
            )
        if (
            event.kind in (EventKind.REFUND_SUCCEEDED, EventKind.REFUND_FAILED)
            and event.refund_id is not None
        ):
            return LateOutcome(
                await apply_refund_outcome(
                    conn,
                    application_id=application_id,
                    provider=self.provider,
                    refund_id=event.refund_id,
                    succeeded=event.kind is EventKind.REFUND_SUCCEEDED,
                    reason=event.reason,
                    metrics=metrics,
                    now=now,
                )
            )
        session_event = _SESSION_EVENTS.get(event.kind)
        if session_event is None or event.session_id is None:
            return UNCHANGED
        session = await sessions.get_session(conn, event.session_id)
        if session is None:
            return UNCHANGED
        if session.provider_name != self.provider or (
            event.checkout_reference is not None and event.checkout_reference != session.provider_reference
        ):
            attempt = None
            if event.checkout_reference is not None:
                attempt = await attempts.ended_attempt_of_checkout(
                    conn, self.provider, event.checkout_reference
                )
            if attempt is None or attempt.session_id != session.id:
                # Authentic, but about another checkout than any this session was routed to: a
                # payment of checkout A must never complete session B.
                log.warning(
                    "provider event names another checkout than its session's; not applied",
                    extra={
                        "applicationId": str(application_id),
                        "sessionId": str(session.id),
                        "eventId": event.id,
                        "checkoutReference": event.checkout_reference,
                    },
                )
                return UNCHANGED
            return await apply_to_ended_attempt(
                conn,
                application_id=application_id,
                attempt=attempt,
                event=session_event,
                metrics=metrics,
                now=now,
            )
        if session.status in PAID:
            # Its open attempt may have been paid too after a late success of an ended one paid
            # the session, or have ended so (`late_payments`): then the event is that attempt's.
            late = await apply_to_paid_session(
                conn,
                session=session,
                event=session_event,
                checkout=event.checkout_reference,
                metrics=metrics,
                now=now,
            )
            if late is not None:
                return late
        if session_event is SessionEvent.PAYMENT_DECLINED:
            log.info(
                "payment declined; the session stays open for another try",
                extra={
                    "applicationId": str(application_id),
                    "sessionId": str(session.id),
                    "reason": event.reason,
                },
            )
        return LateOutcome(
            await apply_session_event(
                conn,
                application_id=application_id,
                session_id=session.id,
                event=session_event,
                metrics=metrics,
                now=now,
            )
        )
