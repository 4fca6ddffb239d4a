"""The pool when its server stops being a writable primary: a failover, a switchover, a server fenced
read-only. A unit that finds its connection's server read-only or gone fails as unavailable (a retry
may succeed), and the pool replaces every connection it has, so the next unit writes to the primary
there is now instead of failing on the old one; `ping` (for /readyz) counts only a writable server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from payorch.config import Settings
from payorch.storage.database import Connection, Database, open_database
from payorch.storage.failures import StorageFailure, server_lost, storage_failure

READ_ONLY = "default_transaction_read_only"


@pytest.fixture
async def one_connection(settings: Settings) -> AsyncIterator[Database]:
    """A pool of one connection, so every unit runs on the same one until it is replaced."""
    async with open_database(settings.database.url, min_size=1, max_size=1) as database:
        yield database


async def _turn_read_only(conn: Connection) -> None:
    """Make this connection's session read-only, as a server demoted or fenced under it would."""
    await conn.execute("SET SESSION default_transaction_read_only = on")


async def _take_a_node_id(conn: Connection) -> int:
    taken: int = await conn.fetchval("SELECT nextval('payorch_nodes')::integer")
    return taken


async def test_a_write_refused_as_read_only_is_unavailable_and_the_next_unit_writes_on_a_new_connection(
    one_connection: Database,
) -> None:
    db = one_connection
    await db.autocommit(_turn_read_only)

    with pytest.raises(asyncpg.ReadOnlySQLTransactionError) as refused:
        await db.transaction(_take_a_node_id)

    assert storage_failure(refused.value) is StorageFailure.UNAVAILABLE  # answered 503, not 500
    assert server_lost(refused.value)
    assert db.server_losses == 1
    assert await db.transaction(_take_a_node_id) > 0


async def test_ping_is_false_on_a_read_only_connection_and_replaces_it(one_connection: Database) -> None:
    db = one_connection
    assert await db.ping()
    await db.autocommit(_turn_read_only)

    assert not await db.ping()

    assert await db.ping()
    assert await db.transaction(_take_a_node_id) > 0


async def _shut_down_under(conn: Connection) -> None:
    """What a unit meets when its server shuts down while it runs (pg_ctl stop -m fast)."""
    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


async def test_a_unit_whose_server_shuts_down_under_it_fails_as_unavailable_and_the_next_one_reconnects(
    one_connection: Database,
) -> None:
    db = one_connection
    # The transaction cannot roll back on the closed connection: asyncpg says so, in the handling of
    # the server's goodbye (AdminShutdownError).
    with pytest.raises(asyncpg.InterfaceError) as lost:
        await db.transaction(_shut_down_under)

    assert storage_failure(lost.value) is StorageFailure.UNAVAILABLE
    assert server_lost(lost.value)
    assert db.server_losses == 1
    assert await db.transaction(_take_a_node_id) > 0


async def test_a_url_none_of_whose_hosts_is_writable_is_unavailable(db: Database, settings: Settings) -> None:
    parts = urlsplit(settings.database.url)
    name = parts.path.lstrip("/")
    only_a_primary = urlunsplit(
        parts._replace(query="&".join(filter(None, [parts.query, "target_session_attrs=read-write"])))
    )
    # New sessions of the database are read-only: to asyncpg, its host is not a primary.
    await db.autocommit(lambda conn: conn.execute(f"ALTER DATABASE {name} SET {READ_ONLY} = on"))
    try:
        with pytest.raises(asyncpg.exceptions.TargetServerAttributeNotMatched) as refused:
            async with open_database(only_a_primary, min_size=1, max_size=1):
                pass
        assert storage_failure(refused.value) is StorageFailure.UNAVAILABLE
        assert server_lost(refused.value)
    finally:
        await db.autocommit(lambda conn: conn.execute(f"ALTER DATABASE {name} RESET {READ_ONLY}"))
