"""Liveness and readiness probes, against a database that answers and ones that do not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import trio_asyncio

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.runtime import open_runtime
from payorch.storage.database import Database, open_database
from payorch.storage.nodes import NODE_LOCK_CLASS
from tests.helpers import Client, eventually


async def test_healthz_is_200(client: Client) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert (await response.get_json())["status"] == "ok"


async def test_readyz_is_200_when_the_database_answers(client: Client) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert await response.get_json() == {
        "status": "ok",
        "checks": {"database": True, "supervisors": True, "node": True},
    }


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


async def test_readyz_is_503_while_the_process_holds_no_node_identity(app: PayorchApp) -> None:
    held = app.services.context.node.id
    app.services.context.node.id = None  # as between losing the identity's connection and holding a new one
    try:
        response = await app.test_client().get("/readyz")
        assert response.status_code == 503
        assert (await response.get_json())["checks"]["node"] is False
    finally:
        app.services.context.node.id = held


async def test_a_process_whose_identity_connection_is_cut_takes_a_new_node_id_and_is_ready_again(
    app: PayorchApp, db: Database
) -> None:
    first = app.services.context.node.id
    assert first is not None

    async def cut(conn: asyncpg.Connection) -> None:
        await conn.execute(
            """SELECT pg_terminate_backend(pid) FROM pg_locks
               WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2""",
            NODE_LOCK_CLASS,
            first,
        )

    await db.autocommit(cut)

    async def holds_a_new_id() -> bool:
        return app.services.context.node.id is not None and app.services.context.node.id > first

    await eventually(holds_a_new_id, timeout_s=30)
    assert (await app.test_client().get("/readyz")).status_code == 200
