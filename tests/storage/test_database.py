"""The database bridge: what a read sees of commits made while it runs."""

from __future__ import annotations

import asyncpg
import pytest

from payorch.config import Settings
from payorch.storage.database import Connection, Database


async def _table(db: Database) -> None:
    async def create(conn: Connection) -> None:
        await conn.execute("CREATE TABLE counters (id int PRIMARY KEY, value int NOT NULL)")
        await conn.execute("INSERT INTO counters VALUES (1, 0)")

    await db.transaction(create)


async def _two_reads_around_a_commit(db: Database, url: str, read: str) -> tuple[int, int]:
    """Read the counter, have another connection commit a change, read it again, all in one unit."""

    async def reads(conn: Connection) -> tuple[int, int]:
        first = int(await conn.fetchval("SELECT value FROM counters WHERE id = 1"))
        other = await asyncpg.connect(url)  # the unit runs on the asyncio side, as asyncpg does
        try:
            await other.execute("UPDATE counters SET value = value + 1 WHERE id = 1")  # autocommit
        finally:
            await other.close()
        second = int(await conn.fetchval("SELECT value FROM counters WHERE id = 1"))
        return first, second

    result: tuple[int, int] = await getattr(db, read)(reads)
    return result


async def test_a_snapshot_sees_every_statement_as_of_its_first(db: Database, settings: Settings) -> None:
    await _table(db)
    assert await _two_reads_around_a_commit(db, settings.database.url, "snapshot") == (0, 0)


async def test_an_autocommit_read_sees_each_commit_as_it_happens(db: Database, settings: Settings) -> None:
    await _table(db)
    assert await _two_reads_around_a_commit(db, settings.database.url, "autocommit") == (0, 1)


async def test_a_snapshot_may_not_write(db: Database) -> None:
    async def write(conn: Connection) -> None:
        await conn.execute("CREATE TABLE not_allowed (id int)")

    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        await db.snapshot(write)
