"""The bridge to asyncpg's thread: what a unit of work's caller sees when the unit returns, raises or
is cancelled, and that the thread lives exactly as long as `open_database`'s block."""

from __future__ import annotations

import asyncio
import threading

import asyncpg
import pytest
import trio

from payorch.config import Settings
from payorch.storage.database import Connection, Database, open_database


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
