"""Webhook delivery: every outbox event reaches every active configuration subscribed to it, at
least once, signed per Standard Webhooks.

One loop fans new outbox events out into deliveries, claims the deliveries that are due (never one
whose session has an earlier delivery to the same endpoint still pending), and sends them
concurrently. A claim is a lease in the database: if this process dies mid-delivery, the delivery
is due again when the lease runs out, so nothing is lost. The loop sleeps until PostgreSQL notifies
it of a new event (LISTEN payorch_outbox) or a retry falls due.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from functools import partial

import httpx
import trio
import triopg

from payorch.config import Settings
from payorch.engine.secretbox import SecretBox
from payorch.engine.webhook_signing import webhook_headers
from payorch.http.context import Services
from payorch.http.guarded_transport import GuardedTransport
from payorch.http.ssrf import UnsafeWebhookUrl, check_url_shape, resolve_public_addresses
from payorch.jsonexact import dumps_exact
from payorch.storage import webhooks
from payorch.storage.database import Connection
from payorch.supervisors.restart import supervised

log = logging.getLogger("payorch.supervisors.webhooks")

BATCH = 50
CONCURRENCY = 16
IDLE_WAIT_S = 0.5
RESPONSE_EXCERPT = 1024
DELIVERED, FAILED, PENDING = "DELIVERED", "FAILED", "PENDING"


def webhook_client(settings: Settings) -> httpx.AsyncClient:
    """The one HTTP client for webhooks: every connection to an address the SSRF guard allowed
    (`GuardedTransport`), TLS verified against the system CAs plus `webhooks.ca_bundle`,
    `webhooks.timeout_s` per request, no redirects followed, nothing taken from the environment
    (proxies, .netrc credentials)."""
    context = ssl.create_default_context()
    if settings.webhooks.ca_bundle:
        context.load_verify_locations(cafile=str(settings.webhooks.ca_bundle))
    resolve = partial(
        resolve_public_addresses,
        allow_private_networks=settings.webhooks.allow_private_networks,
        timeout_s=settings.webhooks.timeout_s,
    )
    transport = GuardedTransport(
        ssl_context=context, limits=httpx.Limits(max_connections=CONCURRENCY * 2), resolve=resolve
    )
    return httpx.AsyncClient(
        transport=transport, timeout=settings.webhooks.timeout_s, follow_redirects=False, trust_env=False
    )


def retry_wait_s(schedule: list[float], attempts_made: int, retry_after_s: float | None) -> float | None:
    """Seconds until the next attempt after `attempts_made` attempts; None when none is left.
    A receiver's `Retry-After` (on 429 or 503) is honoured when longer than the schedule's wait."""
    if attempts_made >= len(schedule):
        return None
    wait = schedule[attempts_made]
    return max(wait, retry_after_s) if retry_after_s is not None else wait


def _retry_after_s(response: httpx.Response) -> float | None:
    if response.status_code not in (429, 503):
        return None
    value = response.headers.get("retry-after", "")
    return float(value) if value.isdigit() else None


async def send_signed(
    client: httpx.AsyncClient,
    settings: Settings,
    url: str,
    secrets: list[str],
    fingerprint: str,
    message_id: str,
    body: bytes,
) -> tuple[httpx.Response | None, str | None, int]:
    """POST `body` signed with `secrets` to `url`: (response or None, error or None, latency ms).
    The URL's shape is checked again here, its host's addresses when `client` connects (DNS may
    have changed since the configuration was saved; see `webhook_client`)."""
    started = time.monotonic()
    try:
        check_url_shape(url)
        headers = webhook_headers(secrets, message_id, int(time.time()), body, fingerprint)
        with trio.fail_after(settings.webhooks.timeout_s + 1):
            response = await client.post(url, content=body, headers=headers)
        return response, None, round((time.monotonic() - started) * 1000)
    except UnsafeWebhookUrl as error:
        return None, f"refused: {error}", round((time.monotonic() - started) * 1000)
    except (httpx.HTTPError, trio.TooSlowError, OSError, ssl.SSLError) as error:
        return None, f"{type(error).__name__}: {error}"[:500], round((time.monotonic() - started) * 1000)


async def _deliver(services: Services, client: httpx.AsyncClient, delivery: webhooks.ClaimedDelivery) -> None:
    box: SecretBox = services.secrets
    secrets = [box.open(delivery.secret)]
    if delivery.previous_secret is not None:
        secrets.append(box.open(delivery.previous_secret))
    response, error, latency_ms = await send_signed(
        client,
        services.settings,
        delivery.url,
        secrets,
        delivery.key_fingerprint,
        delivery.event_id,
        dumps_exact(delivery.payload).encode(),
    )
    status_code = response.status_code if response is not None else None
    excerpt = response.text[:RESPONSE_EXCERPT] if response is not None else None
    gone = status_code == 410
    if status_code is not None and 200 <= status_code < 300:
        outcome, retry_in = DELIVERED, None
    else:
        retry_in = (
            None
            if gone
            else retry_wait_s(
                services.settings.webhooks.retry_schedule_s,
                delivery.attempts,
                _retry_after_s(response) if response is not None else None,
            )
        )
        outcome = FAILED if retry_in is None else PENDING

    async def record(conn: Connection) -> None:
        await webhooks.record_attempt(
            conn,
            delivery.id,
            status_code=status_code,
            error=error,
            latency_ms=latency_ms,
            response_body=excerpt,
            outcome=outcome,
            retry_in_s=retry_in,
        )
        if gone:
            await webhooks.deactivate(conn, delivery.config_id, "the receiver answered 410 Gone")

    await services.db.transaction(record)
    services.metrics.webhook_delivery_attempt(outcome)
    log.info(
        "webhook delivery attempt",
        extra={
            "deliveryId": str(delivery.id),
            "eventId": delivery.event_id,
            "attempt": delivery.attempts,
            "statusCode": status_code,
            "outcome": outcome,
            "error": error,
        },
    )


async def deliver_due(services: Services, client: httpx.AsyncClient) -> int:
    """Fan out new events, then send every delivery due now; returns how many were attempted."""
    schedule = services.settings.webhooks.retry_schedule_s
    await services.db.transaction(webhooks.fan_out_events, schedule[0])
    lease_s = services.settings.webhooks.timeout_s + 5  # a claim outlives any attempt of it
    due = await services.db.transaction(webhooks.claim_due_deliveries, limit=BATCH, lease_s=lease_s)
    limiter = trio.CapacityLimiter(CONCURRENCY)
    unfinished = {item.id for item in due}
    try:
        async with trio.open_nursery() as sending:

            async def send(item: webhooks.ClaimedDelivery) -> None:
                async with limiter:
                    await _deliver(services, client, item)
                unfinished.discard(item.id)

            for item in due:
                sending.start_soon(send, item)
    finally:
        if unfinished:
            # Shutting down: hand the claims back so another process need not wait out the lease.
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await services.db.transaction(webhooks.release_claims, list(unfinished))
    return len(due)


async def _listen(dsn: str, wake: trio.MemorySendChannel[None]) -> None:
    """Forward PostgreSQL notifications of new outbox events as wake-ups (coalesced)."""
    async with triopg.connect(dsn) as conn, conn.listen("payorch_outbox", max_buffer_size=1) as notes:
        async for _ in notes:
            with contextlib.suppress(trio.WouldBlock):  # a wake-up is already pending
                wake.send_nowait(None)


async def _delivery_loop(services: Services, client: httpx.AsyncClient) -> None:
    wake_send, wake_receive = trio.open_memory_channel[None](1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_listen, services.db.dsn, wake_send)
        while True:
            if await deliver_due(services, client):
                continue  # more may be due, and successors of what was just delivered
            with trio.move_on_after(IDLE_WAIT_S):
                await wake_receive.receive()


async def run_webhook_supervisor(
    services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    await supervised(services.supervisors, "webhook delivery", _delivery_loop, services, services.webhooks)
