"""The tests' reused database (tests/databases.py): a test that uses it after another sees it as the
migrated template has it, and a copy that cannot be emptied back to the template is replaced."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.databases import REUSES, ReusedDatabase, TestDatabases, database_url


@pytest.fixture
def reused(test_databases: TestDatabases) -> Iterator[ReusedDatabase]:
    """A reused database of the test's own, not the one the test process's other tests share."""
    if not test_databases.superuser():
        pytest.fail(
            "the tests' role is no superuser: no database can be reused (the suite clones one per test)"
        )
    reused = ReusedDatabase(test_databases)
    yield reused
    reused.close()


def _on(url: str, sql: str, *args: Any) -> Any:
    """`sql`'s first value, on a connection of its own to `url`."""

    async def run() -> Any:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


_INVITE = """INSERT INTO invites (id, token_hash, email, expires_at)
             VALUES (gen_random_uuid(), sha256(gen_random_uuid()::text::bytea), 'a@shop.example', now())"""


def test_the_next_test_finds_no_row_of_the_last(reused: ReusedDatabase) -> None:
    url = reused.url()
    _on(url, _INVITE)
    assert _on(url, "SELECT count(*) FROM invites") == 1

    assert reused.url() == url  # the same database, emptied
    assert _on(url, "SELECT count(*) FROM invites") == 0


def test_the_next_test_finds_the_sequences_where_the_template_has_them(reused: ReusedDatabase) -> None:
    url = reused.url()
    first = _on(url, "SELECT nextval('payorch_nodes')")
    _on(url, "SELECT nextval('payorch_nodes')")

    assert reused.url() == url
    assert _on(url, "SELECT nextval('payorch_nodes')") == first


def test_the_rows_the_migrations_wrote_stay(reused: ReusedDatabase) -> None:
    url = reused.url()
    migrations = _on(url, "SELECT count(*) FROM schema_migrations")
    assert migrations > 0

    assert reused.url() == url
    assert _on(url, "SELECT count(*) FROM schema_migrations") == migrations


def test_a_database_whose_tables_changed_is_replaced(reused: ReusedDatabase) -> None:
    url = reused.url()
    _on(url, "ALTER TABLE invites ADD COLUMN note text")

    replaced = reused.url()
    assert replaced != url
    assert _on(replaced, "SELECT count(*) FROM information_schema.columns WHERE column_name = 'note'") == 0


def test_a_database_with_a_setting_of_its_own_is_replaced(reused: ReusedDatabase) -> None:
    url = reused.url()
    name = urlsplit(url).path.lstrip("/")
    _on(url, f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')

    assert reused.url() != url


def test_a_dropped_database_is_replaced(reused: ReusedDatabase) -> None:
    url = reused.url()
    name = urlsplit(url).path.lstrip("/")
    _on(database_url(url, "postgres"), f'DROP DATABASE "{name}" WITH (FORCE)')

    replaced = reused.url()
    assert replaced != url
    assert _on(replaced, "SELECT count(*) FROM invites") == 0


def test_a_session_left_on_the_database_gets_it_replaced(reused: ReusedDatabase) -> None:
    url = reused.url()

    async def stay_connected_while_asked() -> str:
        conn = await asyncpg.connect(url)
        try:
            return await asyncio.to_thread(reused.url)
        finally:
            await conn.close()

    assert asyncio.run(stay_connected_while_asked()) != url


def test_a_copy_serves_a_bounded_number_of_tests(reused: ReusedDatabase) -> None:
    first = reused.url()
    urls = [reused.url() for _ in range(REUSES)]
    assert urls[: REUSES - 1] == [first] * (REUSES - 1)
    assert urls[-1] != first
