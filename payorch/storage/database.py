"""The connection pool, and the one way the rest of payorch talks to PostgreSQL.

asyncpg runs on an asyncio event loop (uvloop's where it is installed) in a thread of its own
(`storage.loop_thread`), which `open_database` starts with the pool and stops with it. Storage
functions are asyncio coroutines that take a connection and do a whole unit of work;
`Database.transaction`, `Database.autocommit` and `Database.snapshot` hand each unit to that thread
once and are woken once when it ends. On uvloop that costs this process a fifth to a half of the CPU
per unit of the trio_asyncio bridge it replaced (docs/bridge.md, `python -m bench.bridge`). The
connections that hold session state, outside the pool (the node lock, LISTEN), live on the same
thread: `Database.dedicated_connection`.

Which thread runs a function is said where it is defined: every function that runs on the
database's thread takes the connection `conn` first and is marked `@on_database_thread`, in
`storage/` and wherever else a unit is written (the engine's commands, a provider that keeps its
checkouts in payorch's database). Everything else runs on Trio's thread (or, said where it is
done, in a worker thread or process). `Database` refuses a unit of payorch's that is not marked,
and tests/test_database_thread.py holds every function taking `conn` first to the mark.

The URL may name several hosts with `target_session_attrs=read-write` (docs/operations.md, "Running on
a replicated PostgreSQL"): asyncpg then opens each new connection on whichever host is the writable
primary. A connection that was opened on the primary outlives its server's role: after a failover it
breaks, after a switchover it may be left on a read-only standby. So a unit that fails because its
connection's server is gone, shutting down or read-only (`failures.server_lost`) makes the pool
replace every connection it has (`Pool.expire_connections`): the next units open theirs on the
primary there is now, and those already on the lost server fail as theirs did, with a failure the
requests answer 503 and a retry resolves (Idempotency-Keys make the retried write happen once).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Concatenate, ParamSpec, TypeVar

import asyncpg
import trio
from asyncpg import Connection

from payorch.config import Settings
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.array_types import know_array_types
from payorch.storage.database_thread import marked_unit, on_database_thread
from payorch.storage.dedicated import CONNECT_TIMEOUT_S, DedicatedConnection, open_dedicated_connection
from payorch.storage.failures import server_lost, storage_failure
from payorch.storage.loop_thread import (
    DatabaseLoopStopped,
    LoopBoundConnection,
    LoopFactory,
    LoopThread,
    default_loop_factory,
    loop_thread,
)
from payorch.storage.together import Together
from payorch.storage.wakeup import DeliveryWakeup, UnitWrites, Wakeup

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["Connection", "Database", "LoopFactory", "create_pool", "open_database"]

Unit = Callable[Concatenate[Connection, P], Awaitable[T]]


class Database:
    """A pool of connections to one PostgreSQL database."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, loop: LoopThread) -> None:
        self._pool = pool
        self._loop = loop
        self.dsn = dsn
        # Rung after each commit that wrote outbox events, which the webhook supervisor waits on,
        # and after each that queued sandbox events, which the sandbox's event sender waits on.
        self.delivery_wakeup = DeliveryWakeup()
        self.sandbox_wakeup = Wakeup()
        # Units that failed because their connection's server was gone, shutting down or read-only,
        # or because no host of the URL was a writable server: each replaced every pooled connection
        # (a failover, a switchover, a restart of PostgreSQL). A metric.
        self.server_losses = 0
        # Units of work handed to the database's thread (each one crossing there and one back),
        # counted on Trio's side since the pool opened, whatever their outcome. A metric.
        self.units_handed = 0
        # Where callers of the same statement at the same moment have it run once for all of them
        # (`storage.together`): the sandbox creates of several applications' actors.
        self.together = Together()
        # The same for reads (`Together.read`): sessions read by id by several requests at once.
        self.reads_together = Together()

    async def _run(self, work: Callable[[], Awaitable[T]]) -> T:
        """`work()` on the loop thread, with a connection of the pool; when it fails because that
        connection's server is gone, shutting down or read-only, every pooled connection is
        replaced before the failure propagates (see the module's text)."""

        async def replacing_lost_connections() -> T:
            try:
                return await work()
            except Exception as error:
                if server_lost(error):
                    await self._pool.expire_connections()
                    self.server_losses += 1
                raise

        self.units_handed += 1
        return await self._loop.run(replacing_lost_connections)

    async def transaction(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` in one transaction: it commits when the unit returns, and rolls
        back when it raises (the exception propagates) or when the caller is cancelled."""

        marked_unit(unit)
        writes = UnitWrites(self.delivery_wakeup, self.sandbox_wakeup)

        async def in_transaction() -> T:
            writes.track()
            async with self._pool.acquire() as conn, conn.transaction():
                return await unit(conn, *args, **kwargs)

        result = await self._run(in_transaction)
        writes.ring_what_was_written()  # committed: new events are delivered without waiting for a poll
        return result

    async def autocommit(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` outside an explicit transaction: each statement commits on its own
        (PostgreSQL's autocommit). For reads, and for units of one statement that may write (an
        upsert, a claim): one statement is atomic by itself. A unit of several writes that must hold
        together belongs in `transaction`."""
        marked_unit(unit)

        async def on_connection() -> T:
            async with self._pool.acquire() as conn:
                return await unit(conn, *args, **kwargs)

        return await self._run(on_connection)

    async def snapshot(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` in a read-only REPEATABLE READ transaction: every statement sees the
        database as of the first, so a record read in parts (a session and its refunds) is never
        half before and half after a commit."""
        marked_unit(unit)

        async def in_snapshot() -> T:
            async with (
                self._pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await unit(conn, *args, **kwargs)

        return await self._run(in_snapshot)

    def dedicated_connection(self, purpose: str) -> AbstractAsyncContextManager[DedicatedConnection]:
        """A connection of its own for the block, outside the pool, on the same loop thread, named
        "payorch <purpose>" in `pg_stat_activity`: for session state (a session-level lock, LISTEN),
        which pooled connections never hold (`storage.dedicated`)."""
        return open_dedicated_connection(self._loop, self.dsn, purpose)

    async def ping(self) -> bool:
        """Whether the database answers within two seconds and takes writes: a pooled connection is
        on a primary that is not read-only. One that finds its server read-only has every pooled
        connection replaced, as a unit that tried to write there would."""
        with trio.move_on_after(2):
            try:
                return await self.autocommit(_takes_writes)
            except Exception as error:
                if storage_failure(error) is None:
                    raise
                return False
        return False


@on_database_thread
async def _prepare_connection(conn: Connection) -> None:
    """json and jsonb columns take and give Python values, with fractions as exact `Decimal`; the
    array types payorch uses are known without a catalog lookup (`storage.array_types`)."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=dumps_exact, decoder=loads_exact, schema="pg_catalog", format="text"
        )
    await know_array_types(conn)


@on_database_thread
async def _keep_session_state(conn: Connection) -> None:
    """What the pool does to a connection given back, beyond rolling back an open transaction
    (which asyncpg always does): nothing. asyncpg's default sends `RESET ALL; UNLISTEN *; CLOSE ALL;
    pg_advisory_unlock_all()`, one more round trip per unit of work, for session state payorch never
    sets on pooled connections (its settings and advisory locks are transaction-scoped, its LISTEN
    connections are its own)."""


@on_database_thread
async def _takes_writes(conn: Connection) -> bool:
    """Raises `ReadOnlySQLTransactionError` (the server lost for writes) when it does not."""
    if await conn.fetchval("SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool"):
        raise asyncpg.ReadOnlySQLTransactionError("the database server is read-only: not the primary")
    return True


async def create_pool(dsn: str, *, min_size: int, max_size: int) -> asyncpg.Pool:
    """The pool `open_database` opens, on the running asyncio loop: each connection prepared as
    payorch reads and writes values (`_prepare_connection`), given back as it is."""
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=60,
        timeout=CONNECT_TIMEOUT_S,
        init=_prepare_connection,
        reset=_keep_session_state,
        connection_class=LoopBoundConnection,
    )


@asynccontextmanager
async def open_database(
    dsn: str, *, min_size: int, max_size: int, loop_factory: LoopFactory | None = None
) -> AsyncIterator[Database]:
    """Open a pool on an event loop in a thread of its own (`loop_factory()`, by default
    `default_loop_factory()`'s). On exit, however the block ends, the pool is closed (shielded; a
    close that takes over five seconds becomes a terminate), then the loop, and the thread has ended.
    Should the loop stop before that, every unit of work fails at once (`loop_thread.DatabaseLoopStopped`,
    the database unavailable) until the block ends."""
    async with loop_thread(loop_factory or default_loop_factory()) as loop:
        pool = await loop.run(lambda: create_pool(dsn, min_size=min_size, max_size=max_size))
        try:
            yield Database(pool, dsn, loop)
        finally:
            # asyncpg's close, cancelled by the deadline, terminates the connections left.
            with trio.move_on_after(5, shield=True):
                # A loop that stopped before its time took the pool's connections with it.
                with contextlib.suppress(DatabaseLoopStopped):
                    await loop.run(pool.close)


async def database_url(settings: Settings) -> str:
    """`database.url`, or the URL of the embedded PostgreSQL under `database.data_dir`."""
    if settings.database.url:
        return settings.database.url
    # Imported only when needed: pgserver warns at import time when XDG_RUNTIME_DIR is unset
    # (harmless, see storage/embedded.py), and that plain-text warning would break the one-JSON-
    # object-per-line log of every command, even those given a database URL.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from payorch.storage.embedded import start_embedded_postgres
    data_dir = settings.database.data_dir
    log = logging.getLogger("payorch.service")
    log.info("starting embedded PostgreSQL", extra={"dataDir": str(data_dir)})
    return await start_embedded_postgres(data_dir)
