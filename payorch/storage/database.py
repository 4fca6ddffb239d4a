"""The connection pool, and the one way the rest of payorch talks to PostgreSQL.

asyncpg runs on an asyncio event loop (uvloop's where it is installed) in a thread of its own, which
`open_database` starts with the pool and stops with it. Storage functions are asyncio coroutines that
take a connection and do a whole unit of work; `Database.transaction`, `Database.autocommit` and
`Database.snapshot` hand each unit to that thread once and are woken once when it ends. On uvloop that
costs this process a fifth to a half of the CPU per unit of the trio_asyncio bridge it replaced
(docs/bridge.md, `python -m bench.bridge`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

import asyncpg
import outcome
import trio
from asyncpg import Connection

from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.wakeup import DeliveryWakeup, OutboxWrites

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["Connection", "Database", "open_database"]

Unit = Callable[Concatenate[Connection, P], Awaitable[T]]
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class _LoopThread:
    """An asyncio event loop running in a thread of its own, and the way Trio code runs a coroutine
    on it: one handoff there (`call_soon_threadsafe`) and one wake-up back (`run_sync_soon`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, token: trio.lowlevel.TrioToken) -> None:
        self._loop = loop
        self._token = token
        self.stopping = False  # set (in the Trio thread) before the loop is stopped

    async def run(self, make_coroutine: Callable[[], Awaitable[T]]) -> T:
        """What `make_coroutine()` returns or raises, run as an asyncio task on the loop (in that
        thread's context: the caller's context variables are not seen there). A cancelled caller
        cancels the task and waits for it to end, then raises `trio.Cancelled`; if the task ended
        before the cancellation reached it, its own outcome is delivered instead. Once the loop is
        stopping, or if it stops before the task ends, this raises asyncpg's `InterfaceError`, as a
        closed pool does."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.stopping:
            _raise_database_closed()
        loop, token = self._loop, self._token
        caller = trio.lowlevel.current_task()
        task: asyncio.Task[T] | None = None
        raise_cancel: Callable[[], Any] | None = None

        def wake_caller(ended: asyncio.Task[T]) -> None:  # in the Trio thread
            if ended.cancelled():
                cancelled: Callable[[], Any] = raise_cancel or _raise_database_closed
                trio.lowlevel.reschedule(caller, outcome.capture(cancelled))
            elif (error := ended.exception()) is not None:
                trio.lowlevel.reschedule(caller, outcome.Error(error))
            else:
                trio.lowlevel.reschedule(caller, outcome.Value(ended.result()))

        def start() -> None:  # in the loop's thread
            nonlocal task
            task = loop.create_task(_awaited(make_coroutine))
            task.add_done_callback(lambda ended: token.run_sync_soon(wake_caller, ended))

        def cancel() -> None:  # in the loop's thread, always after start(): the loop keeps their order
            assert task is not None
            task.cancel()

        def abort(raise_cancel_in_trio: Callable[[], Any]) -> trio.lowlevel.Abort:
            nonlocal raise_cancel
            raise_cancel = raise_cancel_in_trio
            loop.call_soon_threadsafe(cancel)
            return trio.lowlevel.Abort.FAILED  # the caller is woken when the task has ended

        loop.call_soon_threadsafe(start)
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result


async def _awaited(make_coroutine: Callable[[], Awaitable[T]]) -> T:
    return await make_coroutine()


def _raise_database_closed() -> None:
    # Also for a task cancelled by the loop itself as it shut down, not by its caller.
    raise asyncpg.InterfaceError("the database is closed")


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    """Run `loop` until it is stopped; then, as `asyncio.run` does, cancel and finish what is left
    on it, and close it."""
    try:
        loop.run_forever()
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def default_loop_factory() -> LoopFactory:
    """uvloop's event loop where uvloop is installed (it costs less CPU per unit of work), asyncio's
    own otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.SelectorEventLoop
    loop_class: LoopFactory = uvloop.Loop
    return loop_class


@asynccontextmanager
async def _loop_thread(loop_factory: LoopFactory) -> AsyncIterator[_LoopThread]:
    """A new event loop running in a new thread for as long as the block runs; on exit (shielded)
    the loop is stopped and closed, and the thread has ended."""
    loop = loop_factory()
    token = trio.lowlevel.current_trio_token()
    thread_ended = trio.Event()
    how_it_ended: list[outcome.Outcome[None]] = []

    def deliver(result: outcome.Outcome[None]) -> None:  # in the loop's thread, as it ends
        how_it_ended.append(result)
        token.run_sync_soon(thread_ended.set)

    trio.lowlevel.start_thread_soon(lambda: _run_until_stopped(loop), deliver, name="payorch database loop")
    running = _LoopThread(loop, token)
    try:
        yield running
    finally:
        running.stopping = True
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        with trio.CancelScope(shield=True):
            await thread_ended.wait()
        how_it_ended[0].unwrap()


class Database:
    """A pool of connections to one PostgreSQL database."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, loop: _LoopThread) -> None:
        self._pool = pool
        self._loop = loop
        self.dsn = dsn
        # Rung after each commit that wrote outbox events: the webhook supervisor waits on it.
        self.delivery_wakeup = DeliveryWakeup()

    async def transaction(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` in one transaction: it commits when the unit returns, and rolls
        back when it raises (the exception propagates) or when the caller is cancelled."""

        writes = OutboxWrites(self.delivery_wakeup)

        async def in_transaction() -> T:
            writes.track()
            async with self._pool.acquire() as conn, conn.transaction():
                return await unit(conn, *args, **kwargs)

        result = await self._loop.run(in_transaction)
        writes.ring_if_written()  # committed: new outbox events are delivered without waiting for a poll
        return result

    async def autocommit(self, unit: Unit[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `unit(conn, ...)` outside an explicit transaction: each statement commits on its own
        (PostgreSQL's autocommit). For reads, and for units of one statement that may write (an
        upsert, a claim): one statement is atomic by itself. A unit of several writes that must hold
        together belongs in `transaction`."""

        async def on_connection() -> T:
            async with self._pool.acquire() as conn:
                return await unit(conn, *args, **kwargs)

        return await self._loop.run(on_connection)

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

        return await self._loop.run(in_snapshot)

    async def ping(self) -> bool:
        """Whether the database answers a trivial query within two seconds."""
        with trio.move_on_after(2):
            try:
                return bool(await self.autocommit(_select_one))
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
async def open_database(
    dsn: str, *, min_size: int, max_size: int, loop_factory: LoopFactory | None = None
) -> AsyncIterator[Database]:
    """Open a pool on an event loop in a thread of its own (`loop_factory()`, by default
    `default_loop_factory()`'s). On exit, however the block ends, the pool is closed (shielded; a
    close that takes over five seconds becomes a terminate), then the loop, and the thread has ended."""
    async with _loop_thread(loop_factory or default_loop_factory()) as loop:
        pool = await loop.run(
            lambda: asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                command_timeout=60,
                init=_exact_json_codecs,
                reset=_keep_session_state,
            )
        )
        try:
            yield Database(pool, dsn, loop)
        finally:
            # asyncpg's close, cancelled by the deadline, terminates the connections left.
            with trio.move_on_after(5, shield=True):
                await loop.run(pool.close)
