"""The sandbox's webhook sender: delivers its queued events as signed HTTP POSTs.

Each event has one delivery per endpoint of its account. The loop claims due deliveries (`FOR
UPDATE SKIP LOCKED` plus a lease named by this node, so two processes never send one delivery at
once and a dead sender's claims are taken over as soon as it is seen gone), POSTs them
concurrently, and records the answer. With nothing due it waits until the next delivery falls due,
an event is queued in this process (the database's `sandbox_wakeup` rings after its commit) or
`max_wait_s` (a second) passes, whichever comes first: an idle sandbox costs a look a second, and an
event another process queued (that process's sender delivers it, unless it died) or a test's clock
moved past a due time is seen within that second. An answer of 2xx is delivered; anything else, a
network error or a timeout is retried after a backoff doubling from `retry_base_s` up to
`retry_cap_s`, until `max_attempts` attempts were made. A delivery that fails in any other way is
logged and retried the same way: one bad event never stops the loop.

The service runs it with an httpx client whose transport is `httpx.ASGITransport(app)`: events
reach payorch's own HTTP app, through the same route and signature check as any provider's, with no
socket. Given an ordinary client, it sends to the network like an external provider.
"""

from __future__ import annotations

import logging

import httpx
import trio

from payorch.providers.sandbox.signing import SIGNATURE_HEADER, signature_header
from payorch.storage import sandbox as store
from payorch.storage.database import Database
from payorch.storage.nodes import NodeIdentity
from payorch.values.clock import Clock
from payorch.values.secretbox import SecretBox

log = logging.getLogger("payorch.sandbox.sender")

_LEASE_MARGIN_S = 30.0  # beyond the attempt's timeout, for recording its answer
_PAUSE_AFTER_ERROR_S = 1.0
_MIN_WAIT_S = 0.05  # the shortest wait when nothing could be claimed


def retry_delay_s(attempts: int, *, base_s: float, cap_s: float) -> float:
    """The wait after the `attempts`-th failed attempt: base, 2 x base, 4 x base, ... at most `cap_s`."""
    # At most 2 ** 30: past about a thousand doublings a float overflows.
    return float(min(cap_s, base_s * 2 ** min(max(attempts - 1, 0), 30)))


async def run_event_sender(
    db: Database,
    secrets: SecretBox,
    client: httpx.AsyncClient,
    node: NodeIdentity,
    clock: Clock,
    *,
    max_wait_s: float = 1.0,
    batch_size: int = 20,
    attempt_timeout_s: float = 15.0,
    retry_base_s: float = 1.0,
    retry_cap_s: float = 60.0,
    max_attempts: int = 50,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver due sandbox events until cancelled. Started once its first claim is made: the events
    due as it starts are on their way. A first claim that fails propagates (the sender cannot work);
    a later one is logged and tried again after a pause."""
    lease_s = attempt_timeout_s + _LEASE_MARGIN_S
    ready = False
    while True:
        try:
            # One statement claims (atomic by itself), so no transaction: none of its round trips.
            claimed, due_in = await db.autocommit(
                store.claim_due_deliveries_or_wait,
                limit=batch_size,
                lease_s=lease_s,
                owner=node.id,
                now=clock.now(),
            )
        except Exception:
            if not ready:
                raise
            log.exception("claiming sandbox deliveries failed")
            await trio.sleep(max(max_wait_s, _PAUSE_AFTER_ERROR_S))
            continue
        if not ready:
            task_status.started()
            ready = True
        if not claimed:
            # Until the next is due, an event is queued here, or `max_wait_s`. One due now but not
            # claimable is locked by another sender's claim, about to lease it: a short pause.
            wait = max_wait_s if due_in is None else min(max(due_in, _MIN_WAIT_S), max_wait_s)
            with trio.move_on_after(wait):
                await db.sandbox_wakeup.wait()
            continue
        async with trio.open_nursery() as nursery:
            for delivery in claimed:
                nursery.start_soon(
                    _deliver,
                    db,
                    secrets,
                    client,
                    clock,
                    delivery,
                    attempt_timeout_s,
                    retry_base_s,
                    retry_cap_s,
                    max_attempts,
                )


async def _deliver(
    db: Database,
    secrets: SecretBox,
    client: httpx.AsyncClient,
    clock: Clock,
    delivery: store.ClaimedDelivery,
    attempt_timeout_s: float,
    retry_base_s: float,
    retry_cap_s: float,
    max_attempts: int,
) -> None:
    """Make one attempt and record its answer; never raises (but for cancellation)."""
    where = {"eventId": delivery.event_id, "endpointId": delivery.endpoint_id, "attempt": delivery.attempts}
    try:
        error = await _attempt(secrets, client, delivery, attempt_timeout_s, clock)
        if error is None:
            await db.transaction(
                store.mark_delivered, delivery.event_id, delivery.endpoint_id, now=clock.now()
            )
            log.info("sandbox event delivered", extra=where)
            return
        retry_in_s = (
            retry_delay_s(delivery.attempts, base_s=retry_base_s, cap_s=retry_cap_s)
            if delivery.attempts < max_attempts
            else None
        )
        await db.transaction(
            store.mark_failed_attempt,
            delivery.event_id,
            delivery.endpoint_id,
            error=error,
            retry_in_s=retry_in_s,
            now=clock.now(),
        )
        if retry_in_s is None:
            log.warning("sandbox event delivery given up", extra={**where, "error": error})
        else:
            log.info("sandbox event delivery failed", extra={**where, "error": error, "retryInS": retry_in_s})
    except Exception:
        # The claim's lease runs out and the delivery is tried again.
        log.exception("sandbox event delivery could not be recorded", extra=where)


async def _attempt(
    secrets: SecretBox,
    client: httpx.AsyncClient,
    delivery: store.ClaimedDelivery,
    timeout_s: float,
    clock: Clock,
) -> str | None:
    """POST the event once; None when the receiver answered 2xx, else what went wrong."""
    body = delivery.body.encode()
    try:
        secret = secrets.open(delivery.sealed_secret)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "payorch-sandbox/1",
            SIGNATURE_HEADER: signature_header(secret, body, int(clock.now().timestamp())),
        }
        with trio.fail_after(timeout_s):
            response = await client.post(delivery.url, content=body, headers=headers)
    except trio.TooSlowError:
        return f"no answer within {timeout_s} s"
    except Exception as exc:  # network errors, unreadable secret, a receiver app raising in-process
        return type(exc).__name__
    if 200 <= response.status_code < 300:
        return None
    return f"HTTP {response.status_code}"
