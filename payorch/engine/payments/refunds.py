"""Refund commands, run by an application's actor.

A refund is reserved first: the session row is locked, the balance checked and the refund inserted
in one transaction, so two refunds (even from two processes) can never exceed what was paid. Only
then is the provider asked, with an idempotency key derived from the refund id, in a child task:
an acknowledgement within `refunds.submit_timeout_s` answers 201, anything else 202, and the refund
submission supervisor keeps submitting until the provider acknowledges. The provider's verdict
(its event, `apply_refund_outcome`; or its refusal of a submission) completes or fails the refund.

Lanes. One refund's commands run in two lanes of the actor: `CreateRefund` (the reservation, then
the first submission's record and answer) in its session's lane; `SubmitRefund` (the refund
loop's retries, which know only the refund) in the refund's own; its verdict event
(`ApplyProviderEvent`) in the session's lane when the event names the session (the sandbox's,
Stripe's and Mollie's do), else in the refund's. They are not put in one lane because a lane
orders commands only within one process: another process's refund loop and a provider event
delivered to another process run the same refund's commands in their own actors, at the same
time. So the database orders them, whatever the lanes, and one lane would order nothing more.
What orders them:

- the session's row lock (`sessions.lock_session`) orders the creations of one session's refunds
  and their balance check; a new refund is inserted with its first submission claimed by this
  node for `FIRST_SUBMISSION_GRACE_S` (`submit_claimed_by`, `next_submit_at` ahead), so the refund
  loop, which claims only PENDING refunds with `provider_reference IS NULL` that are due (FOR
  UPDATE SKIP LOCKED), leaves the first submission alone unless this node dies first
  (`storage.claim_takeover` releases its claims) or the grace runs out;
- every submission, first or retry, from any process, gives the provider the same idempotency key
  (`provider_refund_key`): however many race, the provider makes one refund, with one reference;
- recording a submission updates the refund's row (waiting for its row lock) under the guard
  `provider_reference IS NULL`: the first acknowledgement recorded keeps the reference and ends
  the retries (`mark_submitted`); a later acknowledgement, or a later "not acknowledged"
  (`schedule_submission`), changes nothing; a retry also reads, before it calls the provider,
  that the refund is still PENDING without a reference (`_pending_submission`);
- a verdict (`_conclude_refund`) locks the refund's row (`refunds.lock_refund`) and applies only
  to a PENDING refund: the first verdict wins (an event's or a refusal's) and a later one changes
  nothing; it clears `next_submit_at`, and the loop claims only PENDING refunds, so submissions
  end with it. An event seen before is not applied again (`storage.provider_events_seen`).

So the races resolve: a verdict recorded before the acknowledgement leaves the refund COMPLETED
(or FAILED) and the acknowledgement still records the reference; a retry racing the first
submission makes no second refund at the provider, and whichever records second changes nothing;
a "not acknowledged" recorded after a verdict schedules a submission the loop never claims; two
verdicts, the first.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import outcome
import trio

from payorch.engine.actors import ApplicationActor, Reply, refund_lane, session_lane
from payorch.engine.body_types import EventType
from payorch.engine.context import Context
from payorch.engine.idempotency import Answer, claim_idempotency_key, in_flight_key
from payorch.engine.payments.records import event_body, new_event_id
from payorch.engine.payments.refund_rules import (
    refund_amount,
    refund_created_body,
    refund_event_data,
)
from payorch.engine.payments.states import WITH_REFUNDS, status_for_refunded
from payorch.metrics import Metrics
from payorch.providers.base import ProviderError, RefundRefused, RefundRequest, RefundSubmitted
from payorch.storage import (
    attempts,
    daily_counters,
    idempotency_keys,
    outbox,
    provider_configs,
    refunds,
    sessions,
)
from payorch.storage.attempts import EndedAttempt
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.storage.refunds import Refund
from payorch.storage.sessions import CheckoutSession
from payorch.values.errors import (
    NotFound,
)
from payorch.values.money import Money
from payorch.values.statuses import FailureReason, RefundStatus, SessionStatus

log = logging.getLogger("payorch.refunds")

# Seconds the supervisor leaves a refund alone while its first submission is under way.
FIRST_SUBMISSION_GRACE_S = 5.0


def refund_scope(session_id: uuid.UUID) -> str:
    return f"POST /api/v1/sessions/{session_id}/refunds"


def provider_refund_key(refund_id: uuid.UUID) -> str:
    """The idempotency key payorch gives the provider: one refund there per refund here."""
    return f"payorch-refund-{refund_id}"


def backoff_s(attempts: int, max_delay_s: float) -> float:
    """Wait before the next submission attempt: exponential (1, 2, 4, ... s) up to `max_delay_s`.
    Plain arithmetic: the attempts are rounds of a supervisor, not a retry loop around one call."""
    doublings = min(max(attempts, 1) - 1, 64)  # 2**64 s is past any max_delay_s, and no float overflows
    return min(max_delay_s, 2.0**doublings)


@dataclass(frozen=True)
class RefundDraft:
    session_id: uuid.UUID
    amount: Money | None  # None: the whole remaining balance
    reason: str | None
    line_items: list[dict[str, Any]] | None


@dataclass(frozen=True)
class _Submission:
    refund: Refund
    request: RefundRequest
    config: provider_configs.ProviderConfig


@on_database_thread
async def _reserve(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    refund_id: uuid.UUID,
    draft: RefundDraft,
    metrics: Metrics,
    owner: int | None,
    now: datetime,
) -> _Submission:
    """Lock the session, check the balance, insert the refund (its first submission claimed by the
    node `owner`) and move the session's status."""
    existing = await refunds.get_refund(conn, refund_id)
    session = await sessions.lock_session(conn, draft.session_id)
    if session is None or session.application_id != application_id:
        raise NotFound("session not found", missing="session")
    if existing is None:
        refunded = await refunds.refunded_minor(conn, session.id)
        requested = draft.amount.minor if draft.amount is not None else None
        amount = refund_amount(SessionStatus(session.status), requested, session.amount_minor, refunded)
        assert session.provider_name is not None
        paid_by = await attempts.refunded_payment(conn, session.id, refund_id)
        existing = await refunds.insert_refund(
            conn,
            refund_id=refund_id,
            session_id=session.id,
            application_id=application_id,
            amount_minor=amount,
            currency=session.currency,
            reason=draft.reason,
            line_items=draft.line_items,
            provider_name=session.provider_name if paid_by is None else paid_by[0],
            first_submission_grace_s=FIRST_SUBMISSION_GRACE_S,
            owner=owner,
            now=now,
        )
        metrics.refund_transition(RefundStatus.PENDING)
        await _settle_session_status(conn, session.id, metrics, now)
    config = await provider_configs.get_provider_config(conn, application_id, existing.provider_name)
    reference = await _payment_reference(conn, session, existing.id)
    if config is None or reference is None:
        raise NotFound("the provider of this session is no longer linked")
    return _submission(existing, reference, config)


@on_database_thread
async def _settle_session_status(
    conn: Connection, session_id: uuid.UUID, metrics: Metrics, now: datetime
) -> None:
    """Make a paid session's status follow the sum of its refunds that are not FAILED."""
    session = await sessions.lock_session(conn, session_id)
    assert session is not None
    if SessionStatus(session.status) not in WITH_REFUNDS or session.status == SessionStatus.REVERSED:
        return
    status = status_for_refunded(session.amount_minor, await refunds.refunded_minor(conn, session_id))
    if status != session.status:
        await sessions.set_session_status(conn, session_id, status, None, now=now)
        metrics.session_transition(session.status, status)
        log.info(
            "session state changed",
            extra={"sessionId": str(session_id), "from": session.status, "to": status.value},
        )


async def _submit(context: Context, submission: _Submission, timeout_s: float) -> RefundSubmitted | None:
    """Ask the provider; None when it did not acknowledge in time (it will be asked again)."""
    provider = context.providers.get(submission.config.provider)
    if provider is None:
        return None
    try:
        with context.provider_call(submission.config, "submit_refund", timeout_s):
            return await provider.submit_refund(
                context.credentials(submission.config),
                submission.request,
                idempotency_key=provider_refund_key(submission.refund.id),
            )
    except RefundRefused:
        raise
    except (ProviderError, trio.TooSlowError) as error:
        log.warning(
            "provider did not acknowledge the refund; it will be submitted again",
            extra={"refundId": str(submission.refund.id), "provider": provider.name, "error": repr(error)},
        )
        return None
    except Exception as error:
        # payorch's own database, which an in-process provider (the sandbox) keeps its state in, is
        # unavailable: the provider is not to blame, and the refund is submitted again later.
        if storage_failure(error) is not StorageFailure.UNAVAILABLE:
            raise
        log.warning(
            "the database was unavailable to the provider; the refund will be submitted again",
            extra={"refundId": str(submission.refund.id), "provider": provider.name, "error": repr(error)},
        )
        return None


@on_database_thread
async def _conclude_refund(
    conn: Connection,
    refund_id: uuid.UUID,
    status: RefundStatus,
    reason: FailureReason | None,
    metrics: Metrics,
    now: datetime,
) -> bool:
    """Give a PENDING refund its verdict, `status`: COMPLETED, or FAILED for `reason` (its amount
    back in the balance), and emit `refund.completed` or `refund.failed`. Under the refund's row
    lock: the first verdict wins, and a later one changes nothing (False)."""
    refund = await refunds.lock_refund(conn, refund_id)
    if refund is None or refund.status != RefundStatus.PENDING:
        return False
    concluded = await refunds.set_refund_outcome(conn, refund_id, status, reason, now=now)
    metrics.refund_transition(status)
    if status is RefundStatus.COMPLETED:
        await daily_counters.count_completed_refund(
            conn,
            application_id=concluded.application_id,
            refund_id=concluded.id,
            provider=concluded.provider_name,
            currency=concluded.currency,
            amount_minor=concluded.amount_minor,
            now=now,
        )
    if status is RefundStatus.FAILED:
        await _settle_session_status(conn, concluded.session_id, metrics, now)
    await _emit_refund_event(conn, concluded, _EVENT_OF_VERDICT[status])
    return True


_EVENT_OF_VERDICT: dict[RefundStatus, EventType] = {
    RefundStatus.COMPLETED: "refund.completed",
    RefundStatus.FAILED: "refund.failed",
}


@on_database_thread
async def _emit_refund_event(conn: Connection, refund: Refund, event_type: EventType) -> None:
    log.info(
        "refund state changed",
        extra={"applicationId": str(refund.application_id), "refundId": str(refund.id), "to": refund.status},
    )
    event_id = new_event_id()
    await outbox.add_event(
        conn,
        event_id=event_id,
        application_id=refund.application_id,
        session_id=refund.session_id,
        event_type=event_type,
        payload=event_body(
            event_id, event_type, refund.updated_at, refund.application_id, refund_event_data(refund)
        ),
    )


@on_database_thread
async def apply_refund_outcome(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    refund_id: uuid.UUID,
    succeeded: bool,
    reason: FailureReason | None,
    metrics: Metrics,
    now: datetime,
) -> bool:
    """`provider`'s verdict on a refund of the application, in this transaction at `now`, counted
    in `metrics`. False when it changes nothing (a refund of another application or provider, or
    one that has its verdict already)."""
    refund = await refunds.get_refund(conn, refund_id)
    if refund is None or refund.application_id != application_id or refund.provider_name != provider:
        return False
    if succeeded:
        return await _conclude_refund(conn, refund_id, RefundStatus.COMPLETED, None, metrics, now)
    verdict = reason or FailureReason.PAYMENT_FAILED
    return await _conclude_refund(conn, refund_id, RefundStatus.FAILED, verdict, metrics, now)


# What one submission came to (`_record_submission`).
_Recorded = Literal["acknowledged", "refused", "unacknowledged"]


@on_database_thread
async def _record_submission(
    conn: Connection,
    refund_id: uuid.UUID,
    result: outcome.Outcome[RefundSubmitted | None],
    context: Context,
    *,
    first: bool,
) -> _Recorded:
    """Record what one submission of the refund came to, in this transaction: acknowledged (the
    provider's reference kept, no more submissions), refused for good (FAILED, `refund.failed`
    emitted), or not acknowledged (submitted again after a pause that grows with the attempts; the
    `first` submission's is one attempt's)."""
    now = context.clock.now()
    try:
        submitted = result.unwrap()
    except RefundRefused as error:
        failed = FailureReason.PROVIDER_REFUSED
        await _conclude_refund(conn, refund_id, RefundStatus.FAILED, failed, context.metrics, now)
        log.warning("provider refused the refund", extra={"refundId": str(refund_id), "error": str(error)})
        return "refused"
    if submitted is not None:
        await refunds.mark_submitted(conn, refund_id, submitted.reference, now=now)
        return "acknowledged"
    attempts = 1
    if not first:
        current = await refunds.get_refund(conn, refund_id)
        attempts = current.submit_attempts + 1 if current else 1
    delay_s = backoff_s(attempts, context.settings.refunds.retry_max_delay_s)
    await refunds.schedule_submission(conn, refund_id, delay_s, now=now)
    return "unacknowledged"


# The namespace of the ids of the refunds payorch creates by itself for duplicate payments: one
# refund per attempt, whichever process or redelivered event asks for it.
_DUPLICATE_REFUNDS = uuid.UUID("5b0f3c1e-8d52-4a57-9d0e-3f6f1c2a7d41")


def duplicate_refund_id(attempt_id: uuid.UUID) -> uuid.UUID:
    """The id of the refund of the attempt's duplicate payment, derived from the attempt: its
    provider's idempotency key follows (`provider_refund_key`)."""
    return uuid.uuid5(_DUPLICATE_REFUNDS, str(attempt_id))


@on_database_thread
async def refund_duplicate_payment(
    conn: Connection, *, session: CheckoutSession, attempt: EndedAttempt, metrics: Metrics, now: datetime
) -> Refund:
    """Refund in full, in the caller's transaction (which holds the session's row lock), the payment
    of `attempt` made after another attempt of the session was paid, and mark the attempt
    DUPLICATE_REFUNDED. The refund is PENDING and due at once: the refund supervisors submit it and
    retry it like any other (`SubmitRefund`); its verdict, `refund.completed` or `refund.failed`
    with reason DUPLICATE, is the merchant's webhook of it. It never counts against the session's
    balance (`storage.refunds`)."""
    refund_id = duplicate_refund_id(attempt.id)
    refund = await refunds.insert_refund(
        conn,
        refund_id=refund_id,
        session_id=session.id,
        application_id=session.application_id,
        amount_minor=session.amount_minor,
        currency=session.currency,
        reason="DUPLICATE",
        line_items=None,
        provider_name=attempt.provider_name,
        first_submission_grace_s=0.0,
        owner=None,
        now=now,
    )
    await attempts.mark_duplicate_refunded(conn, attempt.id, refund_id)
    metrics.refund_transition(RefundStatus.PENDING)
    log.warning(
        "an ended attempt was paid after its session was: its payment is refunded in full",
        extra={
            "applicationId": str(session.application_id),
            "sessionId": str(session.id),
            "attempt": attempt.number,
            "refundId": str(refund_id),
        },
    )
    return refund


@dataclass(frozen=True)
class CreateRefund:
    idempotency_key: str
    fingerprint: bytes
    draft: RefundDraft

    @property
    def lane(self) -> Hashable:
        """The refunded session's lane: its refunds are created one at a time in this process."""
        return session_lane(self.draft.session_id)

    async def run(self, actor: ApplicationActor[Context], reply: Reply[Answer]) -> None:
        context: Context = actor.context
        scope = refund_scope(self.draft.session_id)
        in_flight = in_flight_key(scope, self.idempotency_key)

        @on_database_thread
        async def reserve(conn: Connection, claim: idempotency_keys.Claimed) -> _Submission:
            # A refund the rules refuse (DomainError) rolls the claim back with it: the key stays free.
            return await _reserve(
                conn,
                application_id=actor.application_id,
                refund_id=claim.resource_id,
                draft=self.draft,
                metrics=context.metrics,
                owner=context.node.id,
                now=context.clock.now(),
            )

        fresh = await claim_idempotency_key(
            actor, reply, scope=scope, key=self.idempotency_key, fingerprint=self.fingerprint, then=reserve
        )
        if fresh is None:
            return
        submission = fresh.value
        actor.in_flight[in_flight] = reply
        timeout_s = context.settings.refunds.submit_timeout_s

        async def submit() -> RefundSubmitted | None:
            return await _submit(context, submission, timeout_s)

        async def answer(result: outcome.Outcome[RefundSubmitted | None]) -> None:
            actor.in_flight.pop(in_flight, None)
            response = await context.db.transaction(
                self._answer, submission.refund, result, context, scope, actor
            )
            reply.send(response)

        actor.spawn(submit, answer, reply)

    @on_database_thread
    async def _answer(
        self,
        conn: Connection,
        refund: Refund,
        result: outcome.Outcome[RefundSubmitted | None],
        context: Context,
        scope: str,
        actor: ApplicationActor[Context],
    ) -> Answer:
        recorded = await _record_submission(conn, refund.id, result, context, first=True)
        status = 202 if recorded == "unacknowledged" else 201
        current = await refunds.get_refund(conn, refund.id)
        assert current is not None
        body = refund_created_body(current)
        await idempotency_keys.complete_idempotency_key(
            conn,
            application_id=actor.application_id,
            scope=scope,
            key=self.idempotency_key,
            status=status,
            body=body,
        )
        return Answer(status, body)


@dataclass(frozen=True)
class SubmitRefund:
    """The supervisor's retry of a refund the provider has not acknowledged yet."""

    refund_id: uuid.UUID

    @property
    def lane(self) -> Hashable:
        return refund_lane(self.refund_id)

    async def run(self, actor: ApplicationActor[Context], reply: Reply[bool]) -> None:
        context: Context = actor.context
        submission = await context.db.autocommit(_pending_submission, actor.application_id, self.refund_id)
        if submission is None:
            reply.send(False)
            return
        timeout_s = context.settings.refunds.submit_timeout_s

        async def submit() -> RefundSubmitted | None:
            return await _submit(context, submission, timeout_s)

        async def record(result: outcome.Outcome[RefundSubmitted | None]) -> None:
            recorded = await context.db.transaction(
                _record_submission, submission.refund.id, result, context, first=False
            )
            reply.send(recorded == "acknowledged")

        actor.spawn(submit, record, reply)


@on_database_thread
async def _pending_submission(
    conn: Connection, application_id: uuid.UUID, refund_id: uuid.UUID
) -> _Submission | None:
    refund = await refunds.get_refund(conn, refund_id)
    if refund is None or refund.application_id != application_id:
        return None
    if refund.status != RefundStatus.PENDING or refund.provider_reference is not None:
        return None
    session = await sessions.get_session(conn, refund.session_id)
    config = await provider_configs.get_provider_config(conn, application_id, refund.provider_name)
    reference = None if session is None else await _payment_reference(conn, session, refund.id)
    if reference is None or config is None:
        return None
    return _submission(refund, reference, config)


@on_database_thread
async def _payment_reference(conn: Connection, session: CheckoutSession, refund_id: uuid.UUID) -> str | None:
    """The provider's reference of the payment the refund returns: an ended attempt's
    (`storage.attempts.refunded_payment`), else the session's open attempt's."""
    paid_by = await attempts.refunded_payment(conn, session.id, refund_id)
    return session.provider_reference if paid_by is None else paid_by[1]


def _submission(
    refund: Refund, payment_reference: str, config: provider_configs.ProviderConfig
) -> _Submission:
    """What to ask `config`'s provider for `refund` of the payment `payment_reference`."""
    request = RefundRequest(
        refund_id=refund.id,
        session_id=refund.session_id,
        payment_reference=payment_reference,
        amount=Money(refund.amount_minor, refund.currency),
        reason=refund.reason,
    )
    return _Submission(refund, request, config)


__all__ = [
    "CreateRefund",
    "RefundDraft",
    "SubmitRefund",
    "apply_refund_outcome",
    "duplicate_refund_id",
    "refund_duplicate_payment",
    "refund_scope",
]
