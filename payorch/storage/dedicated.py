"""Dedicated connections: one connection of its own, outside the pool, on the database's loop thread,
for what lives as long as a PostgreSQL session does: the node's advisory lock (`storage.nodes`) and
LISTEN (`storage.notifications`).

Each is named in `pg_stat_activity` (`application_name` "payorch <purpose>"), and knows at once when
it is closed, whoever closed it (the server, the network, the loop thread stopping): asyncpg's
termination listener, on the loop thread, tells Trio through `run_sync_soon`. A connection that stays
open but stops answering (a network cut without a reset) is found by a periodic check.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import asyncpg
import trio
from asyncpg import Connection

from payorch.storage.database_thread import on_database_thread
from payorch.storage.loop_thread import LoopBoundConnection, LoopThread

P = ParamSpec("P")
T = TypeVar("T")

# How long opening one connection may take, over every host of the URL together (asyncpg's
# `timeout`), for the pool's connections too: a unit waiting for a connection while no server
# answers fails within it, as unavailable, instead of holding its request for asyncpg's default
# minute; a dedicated connection is tried again after its pause.
CONNECT_TIMEOUT_S = 5.0
CHECK_EVERY_S = 5.0  # how often a quiet dedicated connection is asked whether it still answers
CHECK_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 5.0  # a graceful close that takes longer becomes a terminate

# What it means that a dedicated connection is lost, however it was: the caller opens another. An
# `InternalClientError` is asyncpg's "no host of the URL is the writable primary" (during a
# switchover, every host may answer as a standby for a while).
LOST = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    trio.TooSlowError,
)


class DedicatedConnection:
    """An open dedicated connection, used from Trio."""

    def __init__(self, loop: LoopThread, conn: Connection, closed: trio.Event) -> None:
        self._loop = loop
        self._conn = conn
        self._closed = closed

    async def run(
        self, unit: Callable[Concatenate[Connection, P], Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`unit(conn, ...)`, run on the loop thread, outside any transaction payorch opens: as
        `Database.autocommit`, on this connection. `unit` may register callbacks on the connection
        (`add_listener`); they run on the loop thread and must not call Trio but through
        `TrioToken.run_sync_soon`."""
        return await self._loop.run(lambda: unit(self._conn, *args, **kwargs))

    async def wait_lost(self) -> NoReturn:
        """Return never: raise once the connection is lost, that is closed (`ConnectionDoesNotExistError`),
        or not answering a trivial query within `CHECK_TIMEOUT_S` (`trio.TooSlowError`), or failing it."""
        while True:
            with trio.move_on_after(CHECK_EVERY_S):
                await self._closed.wait()
                raise asyncpg.ConnectionDoesNotExistError("the dedicated connection was closed")
            with trio.fail_after(CHECK_TIMEOUT_S):
                await self.run(_select_one)


@on_database_thread
async def _select_one(conn: Connection) -> Any:
    return await conn.fetchval("SELECT 1")


@asynccontextmanager
async def open_dedicated_connection(
    loop: LoopThread, dsn: str, purpose: str
) -> AsyncIterator[DedicatedConnection]:
    """A new connection to `dsn` for the block; closed on exit, however the block ends (shielded, at
    most `CLOSE_TIMEOUT_S`, then terminated), which ends its session: its LISTEN and its session
    locks with it."""
    closed = trio.Event()
    token = loop.token

    def on_termination(_: Connection) -> None:  # in the loop's thread
        token.run_sync_soon(closed.set)

    async def connect() -> Connection:
        conn: Connection = await asyncpg.connect(
            dsn,
            server_settings={"application_name": f"payorch {purpose}"},
            timeout=CONNECT_TIMEOUT_S,
            connection_class=LoopBoundConnection,
        )
        conn.add_termination_listener(on_termination)
        return conn

    conn = await loop.run(connect)
    forget = loop.call_on_stop(closed.set)  # a stopped loop takes its connections with it
    try:
        yield DedicatedConnection(loop, conn, closed)
    finally:
        forget()
        with trio.move_on_after(CLOSE_TIMEOUT_S + 1, shield=True):
            # Gone already, or terminated: either way the session has ended.
            with contextlib.suppress(*LOST):
                await loop.run(lambda: conn.close(timeout=CLOSE_TIMEOUT_S))  # aborts once timed out
