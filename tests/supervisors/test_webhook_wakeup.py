"""The delivery supervisor picks a new event up as soon as it commits, not on its next poll: through
the database's delivery wake-up for a commit of this process, through NOTIFY for a commit of another
(here: another pool, with a wake-up of its own, as another process has), and, for a commit it could
not hear of because its listening connection was lost, as soon as that connection is back. The poll
is made an hour long in these tests, so only a wake-up can deliver in time."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import trio

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage import outbox
from payorch.storage.database import Connection, Database, open_database
from payorch.supervisors import delivery_loop as supervisor
from tests import webhook_receiver as receiving
from tests.helpers import Client, Shop, create_session, eventually, new_shop
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver

AN_HOUR_S = 3600.0


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "IDLE_WAIT_S", AN_HOUR_S)


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver, no_poll: None) -> Settings:
    """The receiver's CA trusted, and no poll (patched before any runtime starts)."""
    webhooks = settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})
    return settings.model_copy(update={"webhooks": webhooks})


async def subscribe(client: Client, shop: Shop, receiver: WebhookReceiver) -> None:
    response = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks",
        json={"url": receiver.url},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    receiver.accept_secret((await response.get_json())["signingSecret"])


async def test_an_event_committed_here_is_delivered_by_the_wakeup_alone(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def deaf(*_: Any) -> None:
        await trio.sleep_forever()

    monkeypatch.setattr(supervisor, "_listen", deaf)  # no notification reaches the loop
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, settings)
        await subscribe(client, shop, webhook_receiver)
        created = await (await create_session(client, shop, "k")).get_json()
        await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})

        (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.verified
    assert request.json()["data"]["id"] == created["sessionId"]


def _adding(event_id: str) -> Callable[[Connection, uuid.UUID], Awaitable[None]]:
    """A unit that adds the event `event_id` to the outbox of an application."""

    async def add(conn: Connection, application_id: uuid.UUID) -> None:
        await outbox.add_event(
            conn,
            event_id=event_id,
            application_id=application_id,
            session_id=None,
            event_type="session.completed",
            payload={"id": event_id, "type": "session.completed"},
        )

    return add


async def test_an_event_committed_through_another_pool_is_delivered_on_its_notification(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    event_id = f"evt_{uuid.uuid4().hex}"
    add = _adding(event_id)

    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, settings)
        await subscribe(client, shop, webhook_receiver)
        # Another pool, as another process has: its wake-up is not the one this runtime waits on.
        async with open_database(settings.database.url, min_size=1, max_size=1) as elsewhere:
            await elsewhere.transaction(add, uuid.UUID(shop.application_id))

        (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.headers["webhook-id"] == event_id


def _allowing_connections(database: str, allowed: bool) -> Callable[[Connection], Awaitable[None]]:
    """A unit, run on another database of the server, that lets new connections to `database` in,
    or refuses them (those open stay open)."""

    async def allow(conn: Connection) -> None:
        await conn.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')

    return allow


async def _cut_outbox_listener(conn: Connection) -> int:
    """Terminate the connection that listens for outbox notifications (the node's); returns once it
    is gone."""
    pid: int = await conn.fetchval(
        """SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()""",
        "payorch node",
    )
    assert await conn.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
    return pid


async def _outbox_listener(conn: Connection) -> int | None:
    pid: int | None = await conn.fetchval(
        """SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()""",
        "payorch node",
    )
    return pid


async def test_an_event_committed_while_the_listening_connection_was_lost_is_delivered_once_it_is_back(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    event_id = f"evt_{uuid.uuid4().hex}"
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, settings)
        await subscribe(client, shop, webhook_receiver)
        url = urlsplit(settings.database.url)
        database = url.path.lstrip("/")
        async with (
            open_database(settings.database.url, min_size=1, max_size=1) as elsewhere,
            open_database(urlunsplit(url._replace(path="/postgres")), min_size=1, max_size=1) as server,
        ):
            # While the database refuses new connections, the listener cannot listen again: the
            # event's notification, sent at its commit, reaches nobody in this process.
            await server.autocommit(_allowing_connections(database, False))
            try:
                cut = await elsewhere.autocommit(_cut_outbox_listener)
                await elsewhere.transaction(_adding(event_id), uuid.UUID(shop.application_id))
            finally:
                await server.autocommit(_allowing_connections(database, True))

            async def listening_again() -> int | None:
                pid = await elsewhere.autocommit(_outbox_listener)
                return pid if pid != cut else None

            await eventually(listening_again, timeout_s=30)

        (request,) = await webhook_receiver.wait_for(1, timeout_s=30)
        # The listener opened its connection again by itself: the delivery loop never restarted.
        assert runtime.services.supervisors.restarts["webhook delivery"] == 0
    assert request.headers["webhook-id"] == event_id
