"""The bridge to asyncpg's thread: what a unit of work's caller sees when the unit returns, raises or
is cancelled, that the thread lives exactly as long as `open_database`'s block, and that a loop that
stops before its time fails its callers at once."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
import trio

from payorch.config import Settings
from payorch.storage.database import Connection, Database, open_database
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.storage.loop_thread import (
    THREAD_NAME,
    DatabaseLoopStopped,
    LoopBoundConnection,
    default_loop_factory,
    loop_thread,
)
from tests.helpers import eventually


class UnitFailed(Exception):
    pass


async def _create_table(conn: Connection) -> None:
    await conn.execute("CREATE TABLE notes (id int PRIMARY KEY)")


async def _count(conn: Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM notes"))


async def _insert(conn: Connection, note_id: int) -> None:
    await conn.execute("INSERT INTO notes VALUES ($1)", note_id)


def _loop_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "payorch database loop"]


async def test_a_unit_that_returns_commits(db: Database) -> None:
    await db.transaction(_create_table)
    await db.transaction(_insert, 1)
    assert await db.autocommit(_count) == 1


async def test_a_unit_that_raises_rolls_back_and_its_exception_reaches_the_caller_unchanged(
    db: Database,
) -> None:
    await db.transaction(_create_table)
    failure = UnitFailed("after the insert")

    async def insert_then_fail(conn: Connection) -> None:
        await _insert(conn, 1)
        raise failure

    with pytest.raises(UnitFailed) as raised:
        await db.transaction(insert_then_fail)
    assert raised.value is failure
    assert await db.autocommit(_count) == 0


async def test_a_database_error_keeps_its_asyncpg_type(db: Database) -> None:
    await db.transaction(_create_table)
    await db.transaction(_insert, 1)
    with pytest.raises(asyncpg.UniqueViolationError):
        await db.transaction(_insert, 1)


async def test_a_cancelled_caller_rolls_back_and_gives_the_connection_back(settings: Settings) -> None:
    async with open_database(settings.database.url, min_size=1, max_size=1) as db:
        await db.transaction(_create_table)
        token = trio.lowlevel.current_trio_token()
        inserted = trio.Event()

        async def insert_then_wait_forever(conn: Connection) -> None:
            await _insert(conn, 1)
            token.run_sync_soon(inserted.set)
            await asyncio.Event().wait()

        async with trio.open_nursery() as nursery:

            async def run_unit() -> None:
                await db.transaction(insert_then_wait_forever)

            nursery.start_soon(run_unit)
            await inserted.wait()
            nursery.cancel_scope.cancel()

        # The pool's only connection is back, and the insert was rolled back.
        assert await db.autocommit(_count) == 0


async def test_the_thread_ends_with_the_block(settings: Settings) -> None:
    async with open_database(settings.database.url, min_size=1, max_size=1) as db:
        assert len(_loop_threads()) == 1
        assert await db.ping()
    assert _loop_threads() == []


async def test_the_thread_ends_when_the_block_raises(settings: Settings) -> None:
    with pytest.raises(UnitFailed):
        async with open_database(settings.database.url, min_size=1, max_size=1):
            raise UnitFailed
    assert _loop_threads() == []


async def test_a_database_used_after_its_block_says_it_is_closed(settings: Settings) -> None:
    async with open_database(settings.database.url, min_size=1, max_size=1) as db:
        pass
    with pytest.raises(asyncpg.InterfaceError):
        await db.autocommit(_count)


async def test_a_database_used_after_its_block_does_not_answer_a_ping(settings: Settings) -> None:
    async with open_database(settings.database.url, min_size=1, max_size=1) as db:
        pass
    assert await db.ping() is False  # what /readyz reports: not ready, and no error


async def _stop_the_loop(conn: Connection) -> None:
    """Stop the event loop this unit runs on, as a bug in the loop's thread might, and wait forever."""
    asyncio.get_running_loop().stop()
    await asyncio.Event().wait()


async def test_when_the_loop_stops_by_itself_every_waiting_caller_fails_at_once(settings: Settings) -> None:
    async with open_database(settings.database.url, min_size=1, max_size=4) as db:
        token = trio.lowlevel.current_trio_token()
        waiting = trio.Semaphore(0)
        failures: list[BaseException] = []

        async def wait_forever(conn: Connection) -> None:
            token.run_sync_soon(waiting.release)
            await asyncio.Event().wait()

        async def caller(unit: Callable[[Connection], Awaitable[None]]) -> None:
            try:
                await db.transaction(unit)
            except DatabaseLoopStopped as error:
                failures.append(error)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(caller, wait_forever)
            for _ in range(3):
                await waiting.acquire()
            nursery.start_soon(caller, _stop_the_loop)
        # Every caller failed, none cancelled nor left waiting, with what the service answers 503.
        assert len(failures) == 4
        assert {storage_failure(error) for error in failures} == {StorageFailure.UNAVAILABLE}
        with pytest.raises(DatabaseLoopStopped):
            await db.autocommit(_count)
        assert await db.ping() is False
    assert _loop_threads() == []


async def test_an_exception_that_escapes_the_loop_fails_its_callers_and_is_raised_as_the_block_ends(
    settings: Settings,
) -> None:
    def kill_the_loop() -> None:
        raise SystemExit("an exception no event loop handles")

    async def kill_then_wait(conn: Connection) -> None:
        asyncio.get_running_loop().call_soon(kill_the_loop)
        await asyncio.Event().wait()

    with pytest.raises(SystemExit):
        async with open_database(settings.database.url, min_size=1, max_size=1) as db:
            with pytest.raises(DatabaseLoopStopped):
                await db.autocommit(kill_then_wait)
            assert await db.ping() is False
    assert _loop_threads() == []


class _RecordedConnection(LoopBoundConnection):
    """Says in which thread it was terminated."""

    terminated_in: list[str]

    def terminate(self) -> None:
        type(self).terminated_in.append(threading.current_thread().name)
        super().terminate()


async def test_a_connection_left_open_and_collected_in_the_trio_thread_is_terminated_on_the_loops(
    database_dsn: str,
) -> None:
    """asyncpg terminates an unclosed connection from `__del__`, wherever the collector runs; a uvloop
    transport aborted from another thread while its loop runs crashed the process."""
    _RecordedConnection.terminated_in = []
    async with loop_thread(default_loop_factory()) as loop:
        conn = await loop.run(lambda: asyncpg.connect(database_dsn, connection_class=_RecordedConnection))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del conn
            gc.collect()

        async def terminated() -> list[str] | None:
            return _RecordedConnection.terminated_in or None

        await eventually(terminated)
    assert _RecordedConnection.terminated_in == [THREAD_NAME]


async def test_each_unit_of_work_handed_to_the_thread_is_counted_once_whatever_its_outcome(
    db: Database,
) -> None:
    before = db.units_handed
    await db.transaction(_create_table)
    await db.autocommit(_count)
    await db.snapshot(_count)
    with pytest.raises(asyncpg.UniqueViolationError):
        await db.transaction(_insert, 1)
        await db.transaction(_insert, 1)
    assert db.units_handed == before + 5


async def _echo_or_fail(conn: Connection, value: int) -> int:
    answer = int(await conn.fetchval("SELECT $1::int", value))
    if answer % 2:
        raise UnitFailed(answer)
    return answer


async def test_units_started_at_the_same_moment_each_get_their_own_outcome(db: Database) -> None:
    outcomes: dict[int, object] = {}

    async def run_unit(value: int) -> None:
        try:
            outcomes[value] = await db.autocommit(_echo_or_fail, value)
        except UnitFailed as failure:
            outcomes[value] = failure.args

    async with trio.open_nursery() as nursery:
        for value in range(200):
            nursery.start_soon(run_unit, value)
    assert outcomes == {value: (value,) if value % 2 else value for value in range(200)}


async def test_a_unit_cancelled_as_others_end_at_the_same_moment_is_cancelled_alone() -> None:
    token = trio.lowlevel.current_trio_token()
    started = trio.Semaphore(0)
    release = asyncio.Event()
    cancelled_on_the_loop: list[int] = []
    results: dict[int, int] = {}
    scopes: dict[int, trio.CancelScope] = {}

    async def held(value: int) -> int:  # on the loop
        token.run_sync_soon(started.release)
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled_on_the_loop.append(value)
            raise
        return value

    async with loop_thread(default_loop_factory()) as loop:

        async def caller(value: int) -> None:
            with trio.CancelScope() as scope:
                scopes[value] = scope
                results[value] = await loop.run(lambda: held(value))

        async with trio.open_nursery() as nursery:
            for value in range(5):
                nursery.start_soon(caller, value)
            for _ in range(5):
                await started.acquire()
            scopes[2].cancel()  # its cancel is handed to the loop at once...
            loop._to_loop.hand(release.set)  # ...then the others' release, after it in the same queue
    assert results == {0: 0, 1: 1, 3: 3, 4: 4}
    assert scopes[2].cancelled_caught
    assert cancelled_on_the_loop == [2]


async def test_units_still_cross_after_a_hand_off_to_the_loop_that_raised(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def raising() -> None:
        raise UnitFailed("a hand-off that raised")

    async def reported() -> bool:
        return any(
            record.exc_info is not None and isinstance(record.exc_info[1], UnitFailed)
            for record in caplog.records
        )

    async def ran_after_it() -> bool:
        return bool(ran)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop = db._loop
        loop._to_loop.hand(raising)
        loop._to_loop.hand(lambda: ran.append("handed after it"))
        await eventually(reported)  # by the loop's exception handler, as for any callback of its
        await eventually(ran_after_it)
    assert ran == ["handed after it"]
    assert await db.autocommit(_echo_or_fail, 2) == 2
