"""The delivery loop's connections to receivers: kept open between deliveries, reopened when the
receiver closed them, and never shared in a way that lets one endpoint hold up another's deliveries.
Through the real HTTPS receiver (`tests/webhook_receiver.py`); nothing here times anything."""

from __future__ import annotations

from urllib.parse import urlsplit

import psutil
import trio

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests import webhook_receiver as receiving
from tests.helpers import eventually, new_shop
from tests.test_webhook_delivery import pay, subscribe
from tests.test_webhook_isolation import A, B, recorded, webhook_settings
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver, open_webhook_receiver

webhook_receiver = receiving.webhook_receiver


def _closed_by_the_receiver(port: int, local_port: int) -> bool:
    """Whether this process's connection from `local_port` to the receiver's `port` is no longer
    open both ways: the receiver closed it (CLOSE_WAIT here until payorch notices), or reset it."""
    for connection in psutil.Process().net_connections(kind="tcp"):
        ours = connection.laddr and connection.laddr.port == local_port
        if ours and connection.raddr and connection.raddr.port == port:
            return bool(connection.status != psutil.CONN_ESTABLISHED)
    return True


async def _receiving_until(
    stopped: trio.Event, *, task_status: trio.TaskStatus[WebhookReceiver] = trio.TASK_STATUS_IGNORED
) -> None:
    """A receiver, running until `stopped` is set, when it closes its connections."""
    async with open_webhook_receiver() as receiver:
        task_status.started(receiver)
        await stopped.wait()


async def test_a_kept_alive_connection_the_receiver_closed_is_reopened_and_the_delivery_arrives(
    db: Database, settings: Settings
) -> None:
    stopped = trio.Event()
    async with trio.open_nursery() as nursery:
        receiver: WebhookReceiver = await nursery.start(_receiving_until, stopped)
        port = urlsplit(receiver.url).port
        assert port is not None
        configured = webhook_settings(settings, receiver)
        async with open_runtime(configured, db) as runtime:
            client = runtime.app.test_client()
            shop = await new_shop(client, db, configured)
            config = await subscribe(client, shop, receiver, path="/a")
            await pay(client, shop, key="first")
            (first,) = await receiver.wait_for(1, timeout_s=10)
            assert first.client is not None
            local_port = first.client[1]

            # The receiver restarts on the same port: the connection payorch kept open to it is closed.
            stopped.set()
            async with open_webhook_receiver(port=port) as restarted:
                restarted.accept_secret(config["signingSecret"])

                async def dropped() -> bool:
                    return _closed_by_the_receiver(port, local_port)

                await eventually(dropped, timeout_s=10)
                await pay(client, shop, key="second")
                (second,) = await restarted.wait_for(1, timeout_s=10)
                assert second.verified
                assert second.client is not None and second.client[1] != local_port  # a new connection
                attempts = await eventually(recorded(db, config, count=2))
        # Each delivered at its first attempt: the closed connection cost no failed attempt.
        assert [(attempt["status"], attempt["attempts"]) for attempt in attempts] == [("DELIVERED", 1)] * 2


async def test_deliveries_to_one_endpoint_reuse_its_connection(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    configured = webhook_settings(settings, webhook_receiver)
    async with open_runtime(configured, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, configured)
        await subscribe(client, shop, webhook_receiver, path="/a")
        for number in range(3):
            await pay(client, shop, key=f"k{number}")
            await webhook_receiver.wait_for(number + 1, timeout_s=10)
        assert len({request.client for request in webhook_receiver.requests}) == 1


async def test_an_endpoint_that_hangs_does_not_delay_another_endpoint_of_the_same_merchant(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    patient = webhook_settings(settings, webhook_receiver, timeout_s=60)  # nothing times out here
    released = trio.Event()
    async with open_runtime(patient, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, patient)
        hanging = await subscribe(client, shop, webhook_receiver, path="/a")
        await subscribe(client, shop, webhook_receiver, path="/b")
        webhook_receiver.script([ScriptedResponse(200, hold=released)] * 2, path=A)
        await pay(client, shop, key="first")
        await webhook_receiver.wait_for(1, timeout_s=10, path=A)

        await pay(client, shop, key="second")
        # Both of B's deliveries arrive while A's attempts still hang, on the same host.
        await webhook_receiver.wait_for(2, timeout_s=10, path=B)
        assert not released.is_set()

        released.set()
        attempts = await eventually(recorded(db, hanging, count=2), timeout_s=20)
        assert {attempt["status"] for attempt in attempts} == {"DELIVERED"}
