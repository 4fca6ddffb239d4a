"""One attempt of one claimed webhook delivery: sent, judged, recorded. Whatever happens in it stays
in it: it never raises (except `trio.Cancelled`), so a receiver, or a bug that one receiver's answer
brings out, can fail only its own attempt, never the loop and the other merchants' deliveries.

An attempt that fails inside payorch is still an attempt: it is recorded as failed (`error`
`internal error: ...`) and the delivery is rescheduled per `webhooks.retry_schedule_s`, so the same
delivery can never wedge the supervisor by being retried at once, forever.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from payorch.engine.context import Context
from payorch.outbound.attempt import INTERNAL, AttemptResult, request_body, send_signed
from payorch.outbound.signing_secrets import signing_secrets
from payorch.storage import webhook_deliveries, webhooks
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.webhook_deliveries import ClaimedDelivery
from payorch.values.statuses import DeliveryStatus

log = logging.getLogger("payorch.supervisors.delivery_loop")


def retry_wait_s(schedule: Sequence[float], attempts_made: int, retry_after_s: float | None) -> float | None:
    """Seconds until the next attempt after `attempts_made` attempts; None when none is left.

    A receiver's `Retry-After` (on 429 or 503) is honoured when longer than the schedule's wait, up
    to the longest wait of the schedule: a receiver can slow its own deliveries down, not park them
    beyond what the operator's schedule ever waits (nor overflow a timestamp)."""
    if attempts_made >= len(schedule):
        return None
    wait = schedule[attempts_made]
    if retry_after_s is None:
        return wait
    return max(wait, min(retry_after_s, max(schedule)))


async def attempt_delivery(context: Context, client: httpx.AsyncClient, delivery: ClaimedDelivery) -> None:
    """Send `delivery` once and record the attempt: DELIVERED on 2xx, else PENDING for its next
    attempt or FAILED when none is left (or the receiver answered 410, which also deactivates the
    configuration). Never raises except `trio.Cancelled`: an unexpected error is logged with the
    delivery id and recorded as this attempt's failure."""
    try:
        result = await _send(context, client, delivery)
        outcome, retry_in = await _record(context, delivery, result)
    except Exception as unexpected:
        log.exception("webhook delivery attempt failed inside payorch", extra=_ids(delivery))
        await _record_internal_failure(context, delivery, unexpected)
        return
    _count(context, outcome, result.failure_reason)
    log.info(
        "webhook delivery attempt",
        extra={
            **_ids(delivery),
            "attempt": delivery.attempts,
            "statusCode": result.status_code,
            "outcome": outcome,
            "error": result.error,
            "failureReason": result.failure_reason,
            "latencyMs": result.latency_ms,
            "retryInS": retry_in,
        },
    )


async def _send(context: Context, client: httpx.AsyncClient, delivery: ClaimedDelivery) -> AttemptResult:
    secrets = signing_secrets(
        context.secrets,
        secret=delivery.secret,
        previous_secret=delivery.previous_secret,
        previous_secret_expires_at=delivery.previous_secret_expires_at,
        now=context.clock.now(),
    )
    return await send_signed(
        client,
        url=delivery.url,
        secrets=secrets,
        fingerprint=delivery.key_fingerprint,
        message_id=delivery.event_id,
        body=request_body(delivery.payload),
        timeout_s=context.settings.webhooks.timeout_s,
        log_context=_ids(delivery),
        clock=context.clock,
        allow_loopback=context.settings.webhooks.allow_loopback,
    )


async def _record(
    context: Context, delivery: ClaimedDelivery, result: AttemptResult
) -> tuple[DeliveryStatus, float | None]:
    """Record the attempt and its details in one transaction (one statement, and the configuration
    deactivated on 410); returns the delivery's outcome and the wait before
    its next attempt."""
    schedule = context.settings.webhooks.retry_schedule_s
    gone = result.status_code == 410
    retry_in: float | None = None
    outcome: DeliveryStatus
    if result.succeeded:
        outcome = DeliveryStatus.DELIVERED
    else:
        retry_in = None if gone else retry_wait_s(schedule, delivery.attempts, result.retry_after_s)
        outcome = DeliveryStatus.FAILED if retry_in is None else DeliveryStatus.PENDING

    now = context.clock.now()

    @on_database_thread
    async def record(conn: Connection) -> None:
        await webhook_deliveries.record_attempt(
            conn,
            delivery.id,
            status_code=result.status_code,
            error=result.error,
            latency_ms=result.latency_ms,
            response_body=result.response_excerpt,
            outcome=outcome,
            retry_in_s=retry_in,
            now=now,
            request_headers=result.request_headers,
            response_headers=result.response_headers,
        )
        if gone:
            await webhooks.deactivate(conn, delivery.config_id, "the receiver answered 410 Gone", now=now)

    await context.db.transaction(record)
    return outcome, retry_in


async def _record_internal_failure(
    context: Context, delivery: ClaimedDelivery, unexpected: Exception
) -> None:
    """Count the attempt as failed and schedule the next per the schedule alone. If even that cannot
    be recorded, the claim stays: the delivery is due again when its lease runs out."""
    retry_in = retry_wait_s(context.settings.webhooks.retry_schedule_s, delivery.attempts, None)
    outcome = DeliveryStatus.FAILED if retry_in is None else DeliveryStatus.PENDING
    try:
        await context.db.transaction(
            webhook_deliveries.record_attempt,
            delivery.id,
            status_code=None,
            error=f"internal error: {type(unexpected).__name__}",
            latency_ms=0,
            response_body=None,
            outcome=outcome,
            retry_in_s=retry_in,
            now=context.clock.now(),
        )
    except Exception:
        log.exception(
            "webhook delivery attempt could not be recorded; it is due again when its lease runs out",
            extra=_ids(delivery),
        )
        outcome = DeliveryStatus.PENDING
    _count(context, outcome, INTERNAL)


def _count(context: Context, outcome: DeliveryStatus, failure_reason: str | None) -> None:
    context.metrics.webhook_delivery_attempt(outcome)
    if failure_reason is not None:
        context.metrics.webhook_attempt_failure(failure_reason)


def _ids(delivery: ClaimedDelivery) -> dict[str, str]:
    return {
        "deliveryId": str(delivery.id),
        "eventId": delivery.event_id,
        "webhookId": str(delivery.config_id),
        "applicationId": str(delivery.application_id),
    }
