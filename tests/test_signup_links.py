"""Where `payorch invite`'s links lead (`engine.accounts.invites.signup_link_base`): to the running server,
whose address each node records as it takes its node identity (`storage.nodes`), unless the
invite's own settings name one. "A server" here is `hold_node_identity` in a nursery, as
`runtime.open_runtime` runs it; it is gone when the nursery is cancelled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import trio

from payorch.config import ServerSettings
from payorch.engine.accounts.invites import signup_link_base
from payorch.storage.database import Connection, Database
from payorch.storage.nodes import NodeIdentity, hold_node_identity
from tests.helpers import eventually

FOLLOWING_BIND = ServerSettings(bind="127.0.0.1:8080")  # public_base_url left empty


@asynccontextmanager
async def server_at(db: Database, public_base_url: str) -> AsyncIterator[int]:
    """A node that recorded `public_base_url`, alive until the block is left: its id."""
    identity = NodeIdentity()
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(hold_node_identity, public_base_url=public_base_url), db, identity)
        assert identity.id is not None
        yield identity.id
        nursery.cancel_scope.cancel()


async def test_a_link_leads_to_the_running_server_when_its_settings_only_follow_bind(db: Database) -> None:
    async with server_at(db, "http://127.0.0.1:18080"):
        assert await signup_link_base(db, FOLLOWING_BIND) == "http://127.0.0.1:18080"


async def test_a_public_base_url_the_settings_name_is_the_links(db: Database) -> None:
    async with server_at(db, "http://127.0.0.1:18080"):
        named = ServerSettings(public_base_url="https://pay.example.com")
        assert await signup_link_base(db, named) == "https://pay.example.com"


async def test_with_no_server_running_a_link_follows_its_own_bind(db: Database) -> None:
    assert await signup_link_base(db, FOLLOWING_BIND) == "http://127.0.0.1:8080"


async def test_a_server_that_is_gone_is_not_followed(db: Database) -> None:
    async with server_at(db, "http://127.0.0.1:18080"):
        pass

    async def own_bind() -> bool:
        # PostgreSQL drops the gone node's lock once it sees its connection closed.
        return await signup_link_base(db, FOLLOWING_BIND) == "http://127.0.0.1:8080"

    await eventually(own_bind)


async def test_of_two_servers_the_newest_is_followed(db: Database) -> None:
    async with (
        server_at(db, "http://127.0.0.1:18080"),
        server_at(db, "http://127.0.0.1:18081"),
    ):
        assert await signup_link_base(db, FOLLOWING_BIND) == "http://127.0.0.1:18081"


async def _recorded_nodes(conn: Connection) -> list[int]:
    return [row["node"] for row in await conn.fetch("SELECT node FROM node_public_base_urls ORDER BY node")]


async def test_a_server_starting_forgets_the_servers_that_are_gone(db: Database) -> None:
    async with server_at(db, "http://127.0.0.1:18080") as gone:
        pass
    await eventually(lambda: _not_alive(db, gone))
    async with server_at(db, "http://127.0.0.1:18081") as alive:
        assert await db.autocommit(_recorded_nodes) == [alive]


async def _not_alive(db: Database, node: int) -> bool:
    async def locked(conn: Connection) -> bool:
        return bool(
            await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid::bigint = $1 "
                "AND objsubid = 2",
                node,
            )
        )

    return not await db.autocommit(locked)
