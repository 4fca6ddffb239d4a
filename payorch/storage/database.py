"""The connection pool, and the one way the rest of payorch talks to PostgreSQL.

asyncpg runs on the trio_asyncio loop. Every crossing of that bridge costs, so storage functions are
asyncio coroutines that take a connection and do a whole unit of work; `Database.transaction` and
`Database.read` cross the bridge once per unit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

import asyncpg
import trio
import trio_asyncio
from asyncpg import Connection

from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.outbox import OutboxDoorbell, OutboxWrites

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["Connection", "Database", "open_database"]

Unit = Callable[Concatenate[Connection, P], Awaitable[T]]


class Database:
    """A pool of connections to one PostgreSQL database."""

    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self._pool = pool
        self.dsn = dsn
        # Rung after each commit that wrote outbox events: the webhook supervisor waits on it.
        self.outbox_doorbell = OutboxDoorbell()

    async def transaction(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` in one transaction: it commits when the unit returns, and rolls
        back when it raises (the exception propagates) or when the caller is cancelled."""

        writes = OutboxWrites(self.outbox_doorbell)

        async def in_transaction() -> T:
            writes.track()
            async with self._pool.acquire() as conn, conn.transaction():
                return await unit(conn, *args, **kwargs)

        result: T = await trio_asyncio.aio_as_trio(in_transaction)()
        writes.ring_if_written()  # committed: new outbox events are delivered without waiting for a poll
        return result

    async def read(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` outside an explicit transaction (each statement on its own)."""

        async def on_connection() -> T:
            async with self._pool.acquire() as conn:
                return await unit(conn, *args, **kwargs)

        result: T = await trio_asyncio.aio_as_trio(on_connection)()
        return result

    async def snapshot(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` in a read-only REPEATABLE READ transaction: every statement sees the
        database as of the first, so a record read in parts (a session and its refunds) is never
        half before and half after a commit."""

        async def in_snapshot() -> T:
            async with (
                self._pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await unit(conn, *args, **kwargs)

        result: T = await trio_asyncio.aio_as_trio(in_snapshot)()
        return result

    async def ping(self) -> bool:
        """Whether the database answers a trivial query within two seconds."""
        with trio.move_on_after(2):
            try:
                return bool(await self.read(_select_one))
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                return False
        return False


async def _exact_json_codecs(conn: Connection) -> None:
    """json and jsonb columns take and give Python values, with fractions as exact `Decimal`."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=dumps_exact, decoder=loads_exact, schema="pg_catalog", format="text"
        )


async def _keep_session_state(conn: Connection) -> None:
    """What the pool does to a connection given back, beyond rolling back an open transaction
    (which asyncpg always does): nothing. asyncpg's default sends `RESET ALL; UNLISTEN *; CLOSE ALL;
    pg_advisory_unlock_all()`, one more round trip per unit of work, for session state payorch never
    sets on pooled connections (its settings and advisory locks are transaction-scoped, its LISTEN
    connections are its own)."""


async def _select_one(conn: Connection) -> Any:
    return await conn.fetchval("SELECT 1")


@asynccontextmanager
async def open_database(dsn: str, *, min_size: int, max_size: int) -> AsyncIterator[Database]:
    """Open a pool on the running trio_asyncio loop; closed (shielded) on exit."""
    pool = await trio_asyncio.aio_as_trio(asyncpg.create_pool)(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=60,
        init=_exact_json_codecs,
        reset=_keep_session_state,
    )
    try:
        yield Database(pool, dsn)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await trio_asyncio.aio_as_trio(pool.close)()
