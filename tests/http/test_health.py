"""Liveness and readiness probes, against a database that answers and ones that do not."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Connection, Database
from payorch.storage.loop_thread import DatabaseLoopStopped
from payorch.storage.nodes import NODE_LOCK_CLASS
from tests.helpers import Client, create_session, drop_database, eventually, new_shop


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


async def test_readyz_is_503_when_the_database_was_dropped(client: Client, settings: Settings) -> None:
    assert (await client.get("/readyz")).status_code == 200
    await drop_database(settings.database.url)
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert (await response.get_json())["checks"]["database"] is False


async def test_healthz_is_200_when_the_database_is_gone(client: Client, settings: Settings) -> None:
    await drop_database(settings.database.url)
    response = await client.get("/healthz")
    assert response.status_code == 200


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


async def _stop_the_loop(conn: Connection) -> None:
    """Stop the event loop this unit runs on, as a bug in the database's thread might, and wait."""
    asyncio.get_running_loop().stop()
    await asyncio.Event().wait()


async def test_once_the_database_loop_has_stopped_readyz_and_requests_are_503(
    app: PayorchApp, db: Database, settings: Settings
) -> None:
    client = app.test_client()
    shop = await new_shop(client, db, settings)
    assert (await client.get("/readyz")).status_code == 200
    with pytest.raises(DatabaseLoopStopped):
        await db.autocommit(_stop_the_loop)

    response = await client.get("/readyz")
    assert response.status_code == 503
    assert (await response.get_json())["checks"]["database"] is False
    created = await create_session(client, shop, "after-the-loop-stopped")
    assert created.status_code == 503, await created.get_data(as_text=True)


async def test_the_services_own_address_leads_a_browser_to_the_console(client: Client) -> None:
    response = await client.get("/")
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/"
