"""Webhook delivery: every outbox event reaches every active configuration subscribed to it, at
least once, signed per Standard Webhooks.

One loop fans new outbox events out into deliveries and keeps a fixed pool of delivery slots busy.
It looks for work (one round: one transaction that fans new events out and claims as many due
deliveries as there are free slots) as soon as an event commits, and whenever a slot frees or a retry
may have fallen due; each claimed delivery is attempted in a task of its own
(`webhook_attempts.attempt_delivery`, which never raises). An event committed by this process rings
the database's delivery wake-up right after its commit; one committed by another process arrives as
a notification (LISTEN payorch_outbox). Wake-ups coalesce: however many come during a round, one
more round follows, so a busy loop makes one round per batch of commits, not one per commit, and a
wake-up that finds nothing costs one short transaction.

The claim itself keeps things fair (`storage.webhook_deliveries`): at most `IN_FLIGHT_PER_ENDPOINT`
attempts per endpoint and `IN_FLIGHT_PER_MERCHANT` per merchant, each endpoint's oldest delivery
first, and a session's events in order per endpoint. So a receiver that takes the whole timeout
holds at most its own share of the slots and delays only its own deliveries. Nor does a merchant
take more of the process's CPU than `webhooks.attempts_per_merchant_per_second` attempts' worth
however fast its receivers answer: each round claims no more of a merchant's deliveries than its
token bucket allows (`supervisors.attempt_rates`); a merchant below the rate is not delayed. The
loop has an HTTP client of its own, sized to its slots, whose connections stay open between
deliveries (one TLS handshake per receiver, not per delivery): test sends (`POST
.../webhooks/{id}/test`) go through the runtime's and cannot take its connections. A reload that
changes `webhooks.*` (timeout, CA bundle, private networks; not the rate) gives the loop a new
client at its next round; attempts already made finish on the old one, closed once they are over.

A claim is a lease in the database, named by this node: if this process dies mid-delivery, the
delivery is due again as soon as another node sees it gone (`supervisors.takeover_loop`), or when
the lease runs out, its attempt counted, so nothing is lost. On shutdown the claims still in
flight are handed back at once, unattempted.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from functools import partial

import httpx
import trio

from payorch.config import WebhookSettings
from payorch.engine.body_types import ALWAYS_DELIVERED
from payorch.engine.context import Context
from payorch.outbound.client import CurrentClient, close_after, webhook_client
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage import webhook_deliveries
from payorch.storage.notifications import Notifications
from payorch.supervisors.attempt_rates import AttemptRates, burst_for
from payorch.supervisors.slots import WorkSlots
from payorch.supervisors.webhook_attempts import attempt_delivery

# Attempts in flight at once in one process. Each mostly waits on a receiver, so this is cheap; it
# bounds connections and memory (an attempt keeps at most `outbound.attempt.RESPONSE_EXCERPT` bytes).
DELIVERY_SLOTS = 128
# Attempts in flight at once to one endpoint (webhook configuration), across all processes. A slow
# receiver holds at most this many slots; it still gets that much parallelism across sessions.
IN_FLIGHT_PER_ENDPOINT = 4
# Attempts in flight at once to all the endpoints of one merchant, however many applications and
# endpoints it registers, across all processes. Receivers that all take the whole timeout hold every
# slot of a process only once DELIVERY_SLOTS / IN_FLIGHT_PER_MERCHANT (8) merchants' receivers do so
# at once.
IN_FLIGHT_PER_MERCHANT = 16
# How long a claim lasts beyond the attempt's own timeout: time to record the attempt.
LEASE_MARGIN_S = 5.0
# Claims are looked for at least this often: retries fall due without a notification.
IDLE_WAIT_S = 1.0
# The shortest wait for a merchant's next batch of attempts (`supervisors.attempt_rates`): merchants
# whose batches fall due moments apart are claimed for in one round.
BATCH_WAIT_S = 0.02
FAN_OUT_BATCH = 200
HAND_BACK_TIMEOUT_S = 5.0


async def _round(
    context: Context, client: httpx.AsyncClient, slots: WorkSlots, rates: AttemptRates, nursery: trio.Nursery
) -> int:
    """Fan new events out and claim due deliveries into the free slots, in one transaction, no more
    of a merchant's than its bucket of attempts allows; start an attempt for each claim. Returns how
    many events were fanned out."""
    webhooks = context.settings.webhooks
    rate = webhooks.attempts_per_merchant_per_second
    if (rate, burst_for(rate)) != (rates.rate, rates.burst):  # reloaded
        rates.set_rate(rate, burst_for(rate))
    now = context.clock.now()
    done = await context.db.transaction(
        webhook_deliveries.fan_out_and_claim,
        first_wait_s=webhooks.retry_schedule_s[0],
        fan_out_limit=FAN_OUT_BATCH,
        limit=max(slots.free, 0),
        per_endpoint=IN_FLIGHT_PER_ENDPOINT,
        per_merchant=IN_FLIGHT_PER_MERCHANT,
        lease_s=webhooks.timeout_s + LEASE_MARGIN_S,
        owner=context.node.id,
        now=now,
        always_delivered=ALWAYS_DELIVERED,
        allowances=rates.allowances(now, in_flight=slots.per_owner(), share=IN_FLIGHT_PER_MERCHANT),
        default_allowance=rates.burst,
    )
    per_merchant: dict[uuid.UUID, list[webhook_deliveries.ClaimedDelivery]] = defaultdict(list)
    for delivery in done.claimed:
        per_merchant[delivery.merchant_id].append(delivery)
    for merchant_id, claimed in per_merchant.items():
        rates.spend(merchant_id, len(claimed), now)
        delays = rates.start_delays(merchant_id, len(claimed), now)
        for delivery, delay in zip(claimed, delays, strict=True):
            # A freed slot rings: the delivery's successors in its session may be due too (once its
            # merchant holds a batch again, if it is held to its rate: `_next_wait` wakes the loop).
            slots.start(
                nursery,
                delivery.id,
                delivery.merchant_id,
                partial(_attempt_after, delay, partial(attempt_delivery, context, client, delivery)),
            )
    return done.fanned_out


async def _attempt_after(delay_s: float, attempt: Callable[[], Awaitable[None]]) -> None:
    """`attempt`, `delay_s` seconds from now (`AttemptRates.start_delays`)."""
    if delay_s > 0:
        await trio.sleep(delay_s)
    await attempt()


async def _listen(notes: Notifications, own_origin: str, slots: WorkSlots) -> None:
    """Forward the node's notifications of new outbox events (`NodeChannels.outbox`) as wake-ups, but
    for those of this process's own database, whose wake-up has rung for them already. One
    notification waiting is enough: the loop looks for every new event in each round, and more that
    arrive meanwhile are one `MISSED`, a wake-up too. So is the node's connection lost and reopened:
    events committed while it was lost are found by the round that follows."""
    async for origin in notes:
        if origin != own_origin:
            slots.wake()


def _next_wait(rates: AttemptRates, context: Context) -> float:
    """How long the loop may wait for a wake-up: `IDLE_WAIT_S`, or less when a merchant held to its
    rate will hold a batch sooner (never less than `BATCH_WAIT_S`)."""
    batch_in = rates.next_batch_in(context.clock.now())
    if batch_in is None:
        return IDLE_WAIT_S
    return min(IDLE_WAIT_S, max(batch_in, BATCH_WAIT_S))


def _is_cancellation(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_is_cancellation(inner) for inner in error.exceptions)
    return isinstance(error, trio.Cancelled)


_NOT_OF_THE_CLIENT = {
    "attempts_per_merchant_per_second",
    "analyse_after_changes",
    "attempt_details_retention_days",
}


def _client_settings(webhooks: WebhookSettings) -> dict[str, object]:
    """What the client is built from: the `webhooks.*` settings but the rate of attempts, when the
    deliveries are analysed and how long attempts' details are kept."""
    return webhooks.model_dump(exclude=_NOT_OF_THE_CLIENT)


def _current_client(context: Context, current: CurrentClient, nursery: trio.Nursery) -> httpx.AsyncClient:
    """The client to attempt deliveries with now: rebuilt when a reload changed `webhooks.*` (the
    runtime checked that it builds), the one it replaces closed once its attempts are over."""
    settings = context.settings
    if _client_settings(settings.webhooks) != _client_settings(current.built_from):
        nursery.start_soon(close_after, current.client, current.built_from.timeout_s + LEASE_MARGIN_S)
        current.client = webhook_client(settings, 2 * DELIVERY_SLOTS)
        current.built_from = settings.webhooks
    return current.client


async def _delivery_loop(
    context: Context, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    wakeup = context.db.delivery_wakeup
    rate = context.settings.webhooks.attempts_per_merchant_per_second
    rates = AttemptRates(rate, burst_for(rate))
    # An attempt that ends wakes the loop unless its merchant, held to its rate, has no batch to
    # claim yet (its bucket, or its share of attempts in flight here, has no room for one): the loop
    # then wakes when one is due (`_next_wait`), not at every attempt's end.
    slots: WorkSlots = WorkSlots(
        DELIVERY_SLOTS,
        wakeup,
        lambda merchant: rates.batch_ready(
            merchant,
            context.clock.now(),
            in_flight=slots.per_owner().get(merchant, 0),
            share=IN_FLIGHT_PER_MERCHANT,
        ),
    )
    ready = False
    try:
        # A client of its own: its connections serve deliveries only (one per slot, and room to spare).
        settings = context.settings
        current = CurrentClient(webhook_client(settings, 2 * DELIVERY_SLOTS), settings.webhooks)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_listen, context.channels.outbox, wakeup.origin, slots)
                while True:
                    client = _current_client(context, current, nursery)
                    fanned_out = await _round(context, client, slots, rates, nursery)
                    if not ready:
                        task_status.started()
                        ready = True
                    if fanned_out < FAN_OUT_BATCH:  # else more events wait: fan them out at once
                        await slots.wait_for_wake(_next_wait(rates, context))
        finally:
            with trio.CancelScope(shield=True):
                await current.client.aclose()
    except BaseException as stopped:
        # Shutting down: hand the claims back so another process need not wait out the lease. A
        # crash leaves them to their leases instead: counted, and not due again at once.
        if slots.in_flight and _is_cancellation(stopped):
            with trio.move_on_after(HAND_BACK_TIMEOUT_S, shield=True):
                await context.db.transaction(
                    webhook_deliveries.release_claims, list(slots.in_flight), now=context.clock.now()
                )
        raise


async def run_webhook_supervisor(
    context: Context, board: SupervisorBoard, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Deliver webhooks until cancelled, restarted when it fails. Started once it listens for the
    events other processes commit and its first round has fanned out and claimed what was due as it
    started (a previous run's deliveries included, once the claim takeover released them)."""
    await supervised(board, "webhook delivery", _delivery_loop, context, task_status=task_status)
