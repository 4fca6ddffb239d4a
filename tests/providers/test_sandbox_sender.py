"""The sandbox's event sender, delivering to a real HTTP receiver: a small Quart-Trio app reached
through `httpx.ASGITransport`, as payorch's own app is in the running service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from cryptography.fernet import Fernet
from quart import request
from quart_trio import QuartTrio

from payorch.providers.base import Credentials, EventKind
from payorch.providers.sandbox import SandboxProvider, run_event_sender
from payorch.providers.sandbox.sender import retry_delay_s
from payorch.storage import sandbox as store
from payorch.storage.database import Database
from payorch.storage.nodes import NodeIdentity
from payorch.values.clock import Clock
from payorch.values.secretbox import SecretBox
from tests.clock import ShiftedClock
from tests.helpers import eventually
from tests.providers.helpers import Delivery, deliveries_of, events_of, new_checkout

RECEIVER_URL = "http://receiver.test/events"


@dataclass
class Receiver:
    """A Quart-Trio app that answers every POST with the next scripted status (then 200) and
    records what it received: (path, headers, body, status)."""

    statuses: list[int] = field(default_factory=list)
    received: list[tuple[str, dict[str, str], bytes, int]] = field(default_factory=list)

    def app(self) -> QuartTrio:
        app = QuartTrio("receiver")

        @app.post("/<path:path>")
        async def events(path: str) -> tuple[str, int]:
            status = self.statuses.pop(0) if self.statuses else 200
            body = await request.get_data(as_text=False)
            self.received.append((request.path, dict(request.headers), body, status))
            return "", status

        return app


@pytest.fixture
def receiver() -> Receiver:
    return Receiver()


@pytest.fixture
async def receiver_client(receiver: Receiver) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=receiver.app())) as client:
        yield client


@asynccontextmanager
async def running_sender(
    db: Database, secrets: SecretBox, client: httpx.AsyncClient, clock: Clock, **options: Any
) -> AsyncIterator[None]:
    """The sender, running until the block is left, on the sandbox's `clock`."""
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(run_event_sender, db, secrets, client, NodeIdentity(), clock, **options))
        yield
        nursery.cancel_scope.cancel()


async def wait_for_deliveries(
    db: Database, event_id: str, done: Callable[[Delivery], bool], *, timeout_s: float = 10.0
) -> list[Delivery]:
    """The event's deliveries, once each is `done`; `trio.TooSlowError` after `timeout_s`."""

    async def all_done() -> list[Delivery] | None:
        deliveries = await deliveries_of(db, event_id)
        return deliveries if deliveries and all(done(delivery) for delivery in deliveries) else None

    return await eventually(all_done, timeout_s)


async def wait_for_delivery(db: Database, event_id: str) -> Delivery:
    """The event's one delivery, once delivered or given up."""
    (delivery,) = await wait_for_deliveries(
        db, event_id, lambda delivery: delivery.delivered_at is not None or delivery.given_up_at is not None
    )
    return delivery


async def wait_for_attempts_recorded(db: Database, event_id: str) -> list[Delivery]:
    """The event's deliveries, once each has been delivered or has a failed attempt on record."""
    return await wait_for_deliveries(
        db, event_id, lambda delivery: delivery.delivered_at is not None or delivery.last_error is not None
    )


async def wait_for_attempt_recorded(db: Database, event_id: str) -> Delivery:
    (delivery,) = await wait_for_attempts_recorded(db, event_id)
    return delivery


async def _paid_event(sandbox: SandboxProvider, credentials: Credentials, db: Database) -> store.SandboxEvent:
    _, checkout_id = await new_checkout(sandbox, credentials)
    await sandbox.pay(checkout_id, "4242424242424242")
    (event,) = await events_of(db, checkout_id)
    return event


async def _paid_then_disputed(
    db: Database, secrets: SecretBox, credentials: Credentials, clock: ShiftedClock, *, dispute_delay_ms: int
) -> tuple[store.SandboxEvent, store.SandboxEvent]:
    """A checkout paid with the card whose payment is lost to a dispute `dispute_delay_ms` later, on a
    sandbox of `clock` with the receiver registered: its two events, the payment's and the dispute's."""
    sandbox = SandboxProvider(
        db, secrets, public_base_url="http://payorch.test", dispute_delay_ms=dispute_delay_ms, clock=clock
    )
    await sandbox.register_webhook(credentials, RECEIVER_URL)
    _, checkout_id = await new_checkout(sandbox, credentials)
    await sandbox.pay(checkout_id, "4000000000000259")
    paid, dispute = await events_of(db, checkout_id)
    return paid, dispute


async def test_asgi_transport_reaches_a_quart_trio_app_under_trio(
    receiver: Receiver, receiver_client: httpx.AsyncClient
) -> None:
    response = await receiver_client.post(RECEIVER_URL, content=b'{"ping": 1}')
    assert response.status_code == 200
    assert receiver.received[0][2] == b'{"ping": 1}'


async def test_sender_delivers_a_queued_event_signed_to_the_receiver(
    sandbox: SandboxProvider,
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    receiver: Receiver,
    receiver_client: httpx.AsyncClient,
) -> None:
    registration = await sandbox.register_webhook(credentials, RECEIVER_URL)
    event = await _paid_event(sandbox, credentials, db)
    async with running_sender(db, secrets, receiver_client, sandbox.clock):
        delivery = await wait_for_delivery(db, event.id)
    assert (delivery.delivered_at is not None, delivery.attempts) == (True, 1)
    ((path, headers, body, _),) = receiver.received
    assert path == "/events"
    assert body == event.body.encode()
    assert headers["Content-Type"] == "application/json"
    parsed = sandbox.parse_event(headers, body, registration.secret)  # the receiver's own check
    assert (parsed.id, parsed.kind) == (event.id, EventKind.PAYMENT_SUCCEEDED)


async def test_sender_retries_after_a_500_until_a_2xx(
    sandbox: SandboxProvider,
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    receiver: Receiver,
    receiver_client: httpx.AsyncClient,
) -> None:
    await sandbox.register_webhook(credentials, RECEIVER_URL)
    receiver.statuses = [500, 503]
    event = await _paid_event(sandbox, credentials, db)
    async with running_sender(db, secrets, receiver_client, sandbox.clock, retry_base_s=0.05):
        delivery = await wait_for_delivery(db, event.id)
    assert delivery.delivered_at is not None
    assert delivery.attempts == 3
    assert [status for *_, status in receiver.received] == [500, 503, 200]
    assert len({body for _, _, body, _ in receiver.received}) == 1  # the same event each time


async def test_failed_attempt_is_due_again_after_its_backoff(
    sandbox: SandboxProvider,
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    receiver: Receiver,
    receiver_client: httpx.AsyncClient,
) -> None:
    await sandbox.register_webhook(credentials, RECEIVER_URL)
    receiver.statuses = [500]
    event = await _paid_event(sandbox, credentials, db)
    async with running_sender(db, secrets, receiver_client, sandbox.clock, retry_base_s=30):
        delivery = await wait_for_attempt_recorded(db, event.id)
    assert (delivery.attempts, delivery.delivered_at, delivery.last_error) == (1, None, "HTTP 500")
    assert delivery.deliver_at - event.deliver_at >= timedelta(seconds=30)
    assert len(receiver.received) == 1


async def test_network_error_counts_as_a_failed_attempt(
    sandbox: SandboxProvider, credentials: Credentials, db: Database, secrets: SecretBox
) -> None:
    await sandbox.register_webhook(credentials, "http://127.0.0.1:9/events")  # discard port: refused
    event = await _paid_event(sandbox, credentials, db)
    async with (
        httpx.AsyncClient() as client,
        running_sender(db, secrets, client, sandbox.clock, max_attempts=2, retry_base_s=0.05),
    ):
        delivery = await wait_for_delivery(db, event.id)
    assert delivery.given_up_at is not None and delivery.delivered_at is None
    assert delivery.attempts == 2
    assert delivery.last_error == "ConnectError"


async def test_delivery_is_given_up_after_max_attempts(
    sandbox: SandboxProvider,
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    receiver: Receiver,
    receiver_client: httpx.AsyncClient,
) -> None:
    await sandbox.register_webhook(credentials, RECEIVER_URL)
    receiver.statuses = [500] * 10
    event = await _paid_event(sandbox, credentials, db)
    async with running_sender(db, secrets, receiver_client, sandbox.clock, max_attempts=3, retry_base_s=0.05):
        delivery = await wait_for_delivery(db, event.id)
    assert (delivery.attempts, delivery.given_up_at is not None) == (3, True)
    assert len(receiver.received) == 3


async def test_one_undeliverable_endpoint_does_not_hold_up_the_others(
    sandbox: SandboxProvider,
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    receiver: Receiver,
    receiver_client: httpx.AsyncClient,
) -> None:
    # An endpoint whose secret no longer opens (as after a lost encryption key), and a good one.
    lost = SandboxProvider(
        db, SecretBox(Fernet.generate_key().decode()), public_base_url="http://payorch.test"
    )
    await lost.register_webhook(credentials, "http://receiver.test/lost")
    await sandbox.register_webhook(credentials, RECEIVER_URL)
    event = await _paid_event(sandbox, credentials, db)
    async with running_sender(db, secrets, receiver_client, sandbox.clock, retry_base_s=30):
        deliveries = await wait_for_attempts_recorded(db, event.id)
    outcomes = sorted((delivery.delivered_at is not None, delivery.last_error) for delivery in deliveries)
    assert outcomes == [(False, "UnreadableSecret"), (True, None)]
    assert [path for path, *_ in receiver.received] == ["/events"]


async def test_events_are_not_sent_before_they_are_due(
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    clock: ShiftedClock,
    receiver_client: httpx.AsyncClient,
) -> None:
    # A lost dispute an hour after the payment: no slowness of this machine makes it due early.
    paid, dispute = await _paid_then_disputed(db, secrets, credentials, clock, dispute_delay_ms=3_600_000)
    async with running_sender(db, secrets, receiver_client, clock):
        await wait_for_delivery(db, paid.id)
        (pending,) = await deliveries_of(db, dispute.id)
        assert (pending.attempts, pending.delivered_at) == (0, None)
        clock.advance(3600)
        delivered = await wait_for_delivery(db, dispute.id)
    assert delivered.delivered_at is not None and delivered.delivered_at >= dispute.deliver_at


def test_retry_delay_doubles_from_the_base_up_to_the_cap() -> None:
    delays = [retry_delay_s(attempts, base_s=1.0, cap_s=60.0) for attempts in range(1, 10)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert retry_delay_s(10_000, base_s=1.0, cap_s=60.0) == 60.0


async def test_an_event_queued_while_the_sender_waits_is_sent_without_waiting_for_its_next_look(
    sandbox: SandboxProvider,
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    receiver_client: httpx.AsyncClient,
) -> None:
    # The sender looks again only after an hour: the commit that queued the event wakes it.
    await sandbox.register_webhook(credentials, RECEIVER_URL)
    async with running_sender(db, secrets, receiver_client, sandbox.clock, max_wait_s=3600):
        await trio.testing.wait_all_tasks_blocked()
        event = await _paid_event(sandbox, credentials, db)
        delivery = await wait_for_delivery(db, event.id)
    assert delivery.delivered_at is not None


async def test_a_delayed_event_is_sent_once_due_without_waiting_for_the_senders_next_look(
    credentials: Credentials,
    db: Database,
    secrets: SecretBox,
    clock: ShiftedClock,
    receiver_client: httpx.AsyncClient,
) -> None:
    # A lost dispute half a second after the payment, the sender looking again only after an hour:
    # it waits for the dispute's due time, which it read when it last found nothing due.
    paid, dispute = await _paid_then_disputed(db, secrets, credentials, clock, dispute_delay_ms=500)
    async with running_sender(db, secrets, receiver_client, clock, max_wait_s=3600):
        await wait_for_delivery(db, paid.id)
        delivered = await wait_for_delivery(db, dispute.id)
    assert delivered.delivered_at is not None and delivered.delivered_at >= dispute.deliver_at
