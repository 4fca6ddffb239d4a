"""Liveness and readiness probes, against a database that answers and ones that do not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import trio_asyncio

from payorch.config import Settings
from payorch.http.context import PayorchApp
from payorch.runtime import open_runtime
from payorch.storage.database import Database, open_database
from tests.helpers import Client


async def test_healthz_is_200(client: Client) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert (await response.get_json())["status"] == "ok"


async def test_readyz_is_200_when_the_database_answers(client: Client) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert await response.get_json() == {"status": "ok", "checks": {"database": True, "supervisors": True}}


@pytest.fixture
async def app_with_closed_pool(settings: Settings, db: Database) -> AsyncIterator[PayorchApp]:
    """An app whose database pool has been closed, as during a shutdown (`db` brings the loop)."""
    async with open_database(settings.database.url, min_size=1, max_size=1) as closed:
        pass
    async with open_runtime(settings, closed) as runtime:
        yield runtime.app


async def test_readyz_is_503_when_the_pool_is_closed(app_with_closed_pool: PayorchApp) -> None:
    response = await app_with_closed_pool.test_client().get("/readyz")
    assert response.status_code == 503
    body = await response.get_json()
    assert (body["status"], body["checks"]["database"]) == ("unavailable", False)


async def test_healthz_is_200_when_the_database_is_gone(app_with_closed_pool: PayorchApp) -> None:
    response = await app_with_closed_pool.test_client().get("/healthz")
    assert response.status_code == 200


async def drop_database(dsn: str) -> None:
    """Drop the database `dsn` names, terminating every connection to it."""
    parts = urlsplit(dsn)
    conn = await trio_asyncio.aio_as_trio(asyncpg.connect)(urlunsplit(parts._replace(path="/postgres")))
    try:
        await trio_asyncio.aio_as_trio(conn.execute)(f"DROP DATABASE {parts.path.lstrip('/')} WITH (FORCE)")
    finally:
        await trio_asyncio.aio_as_trio(conn.close)()


async def test_readyz_is_503_when_the_database_was_dropped(client: Client, settings: Settings) -> None:
    assert (await client.get("/readyz")).status_code == 200
    await drop_database(settings.database.url)
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert (await response.get_json())["checks"]["database"] is False


async def test_readyz_is_503_while_a_supervisor_waits_to_restart(app: PayorchApp) -> None:
    app.services.supervisors.running["session expiry"] = False
    response = await app.test_client().get("/readyz")
    assert response.status_code == 503
    assert (await response.get_json())["checks"]["supervisors"] is False
