"""The checkout session state machine, as pure functions.

    (create) -> PENDING
    PENDING  --payment succeeded-->            SUCCEEDED        emits session.completed
    PENDING  --payment declined-->             PENDING          the customer may try again
    PENDING  --expired-->                      FAILED/EXPIRED   emits session.expired
    FAILED   --payment succeeded-->            SUCCEEDED        emits session.completed (a late payment)
    any state but REFUNDED --dispute lost-->   REVERSED         emits session.dispute_lost
    REFUNDED --dispute lost-->                 REFUNDED         emits session.dispute_lost
    SUCCEEDED | PARTIALLY_REFUNDED | REFUNDED  follow the refunded sum (see `status_for_refunded`)

A transition that does not apply to the current state is refused with `TransitionRefused`; callers
treat a refused provider outcome as already applied (providers deliver events more than once).

A late payment is one the provider took after payorch expired the session: at expiry payorch closes
the provider's checkout (`engine.payments.expiry`), but a provider that could not be reached then, or a
delayed payment method, can still report a payment. The money was taken, so the session succeeds
and the merchant hears `session.completed` (and can refund it); ignoring it would leave a payment
nobody accounts for.

A lost dispute (a chargeback) means the provider took the payment's money back from the merchant.
It proves the payment happened, so a session payorch still holds PENDING or FAILED (its payment
event not yet applied) is REVERSED as a paid one is; a REFUNDED session stays REFUNDED, though the
money went out twice (the refund and the dispute). Whatever the state, the session records when
(`disputeLostAt`) and the merchant hears `session.dispute_lost`, once per dispute the provider reports.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from payorch.engine.body_types import EventType
from payorch.values.statuses import FailureReason, Outcome, SessionStatus


class SessionEvent(enum.StrEnum):
    PAYMENT_SUCCEEDED = "payment_succeeded"
    PAYMENT_DECLINED = "payment_declined"
    EXPIRED = "expired"
    DISPUTE_LOST = "dispute_lost"


REFUNDABLE = frozenset({SessionStatus.SUCCEEDED, SessionStatus.PARTIALLY_REFUNDED})
# The states a session reaches only once it was paid.
PAID = frozenset(
    {
        SessionStatus.SUCCEEDED,
        SessionStatus.PARTIALLY_REFUNDED,
        SessionStatus.REFUNDED,
        SessionStatus.REVERSED,
    }
)
# The states whose read record lists its refunds (the paid ones); `refunds` is null in the others.
WITH_REFUNDS = PAID


class TransitionRefused(Exception):
    """The event does not apply to a session in this state."""

    def __init__(self, status: SessionStatus, event: SessionEvent) -> None:
        super().__init__(f"{event.value} does not apply to a {status.value} session")
        self.status = status
        self.event = event


@dataclass(frozen=True)
class Transition:
    status: SessionStatus
    failure_reason: FailureReason | None = None
    emits: EventType | None = None  # the webhook event this transition emits, if any
    dispute_lost: bool = False  # the session records when a lost dispute was reported


def transition(status: SessionStatus, event: SessionEvent) -> Transition:
    """Where `event` takes a session in `status`; `TransitionRefused` when it does not apply."""
    if status is SessionStatus.PENDING:
        if event is SessionEvent.PAYMENT_SUCCEEDED:
            return Transition(SessionStatus.SUCCEEDED, emits="session.completed")
        if event is SessionEvent.PAYMENT_DECLINED:
            return Transition(SessionStatus.PENDING)
        if event is SessionEvent.EXPIRED:
            return Transition(
                SessionStatus.FAILED, failure_reason=FailureReason.EXPIRED, emits="session.expired"
            )
    if status is SessionStatus.FAILED and event is SessionEvent.PAYMENT_SUCCEEDED:
        return Transition(SessionStatus.SUCCEEDED, emits="session.completed")
    if event is SessionEvent.DISPUTE_LOST:
        reversed_to = SessionStatus.REFUNDED if status is SessionStatus.REFUNDED else SessionStatus.REVERSED
        return Transition(reversed_to, emits="session.dispute_lost", dispute_lost=True)
    raise TransitionRefused(status, event)


def status_for_refunded(total_minor: int, refunded_minor: int) -> SessionStatus:
    """The status of a paid session whose refunds that are not FAILED add up to `refunded_minor`."""
    if not 0 <= refunded_minor <= total_minor:
        raise ValueError("refunded sum must lie between 0 and the session total")
    if refunded_minor == 0:
        return SessionStatus.SUCCEEDED
    if refunded_minor < total_minor:
        return SessionStatus.PARTIALLY_REFUNDED
    return SessionStatus.REFUNDED


def first_outcome(event: SessionEvent) -> Outcome | None:
    """The outcome `event` gives the payment attempt it is about (each attempt has one: the highest
    it was given, a payment above a decline above an expiry, `storage.routing_outcomes`); None for
    an event that says nothing about the provider's approval (a lost dispute)."""
    if event is SessionEvent.PAYMENT_SUCCEEDED:
        return Outcome.SUCCESS
    if event is SessionEvent.PAYMENT_DECLINED:
        return Outcome.FAILURE
    if event is SessionEvent.EXPIRED:
        return Outcome.ABANDONMENT
    return None
