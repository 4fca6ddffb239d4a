"""While `database.url` names no writable server (a failover between the primary's loss and the
promotion of a standby), requests that need the database answer 503 with Retry-After, never 500,
and /readyz answers 503; once a primary is back, the service is too, by itself, and a create
retried with its Idempotency-Key creates its session once.

A primary's loss is played on the test server: the database's new sessions are made read-only
(`default_transaction_read_only`, so a connection asking for `target_session_attrs=read-write` is
refused, as by a standby) and every session it had is terminated (as by a primary going away)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from payorch.config import DatabaseSettings, Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Connection, Database, open_database
from tests.helpers import create_session, eventually, new_shop


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The test's settings, with a URL that connects only to a writable server."""
    parts = urlsplit(settings.database.url)
    query = "&".join(filter(None, [parts.query, "target_session_attrs=read-write"]))
    url = urlunsplit(parts._replace(query=query))
    return settings.model_copy(update={"database": DatabaseSettings(url=url, pool_min=1, pool_max=4)})


@pytest.fixture
async def admin(database_dsn: str) -> AsyncIterator[Database]:
    """A pool of the test's database of its own, opened while its server is writable."""
    async with open_database(database_dsn, min_size=1, max_size=1) as database:
        yield database


async def _lose_the_primary(conn: Connection) -> None:
    name = await conn.fetchval("SELECT current_database()")
    await conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    await conn.execute(
        """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()"""
    )


async def _promote(conn: Connection) -> None:
    name = await conn.fetchval("SELECT current_database()")
    await conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')


async def test_without_a_primary_creates_and_readyz_are_503_with_retry_after_until_one_is_back(
    app: PayorchApp, db: Database, settings: Settings, admin: Database
) -> None:
    client = app.test_client()
    shop = await new_shop(client, db, settings)
    await admin.autocommit(_lose_the_primary)
    try:
        created = await create_session(client, shop, "across-the-failover")
        assert created.status_code == 503, await created.get_data(as_text=True)
        assert created.headers["Retry-After"] == "1"
        read = await client.get("/api/v1/sessions/00000000-0000-0000-0000-000000000000", headers=shop.headers)
        assert read.status_code == 503, await read.get_data(as_text=True)  # the API key's lookup too
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert (await ready.get_json())["checks"]["database"] is False
    finally:
        await admin.autocommit(_promote)

    async def created_once_back() -> str | None:
        response = await create_session(client, shop, "across-the-failover")
        if response.status_code == 503:
            return None
        assert response.status_code == 201, await response.get_data(as_text=True)
        session_id: str = (await response.get_json())["sessionId"]
        return session_id

    first = await eventually(created_once_back, timeout_s=10)
    again = await create_session(client, shop, "across-the-failover")
    assert (await again.get_json())["sessionId"] == first
    assert again.headers["Idempotent-Replayed"] == "true"

    async def ready() -> bool:
        return (await client.get("/readyz")).status_code == 200

    await eventually(ready, timeout_s=30)
