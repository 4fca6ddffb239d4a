"""A run's reading and writing go through a connection of its own, whose PostgreSQL backend runs at
the least priority (docs/reconciliation.md, "How a run shares the server"): a run that loses it
ends FAILED with its items whole, and the account can be run again."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.engine.reconciliation.runs import RUN_CONNECTION
from payorch.storage.backend_priority import BACKEND_NICENESS
from payorch.storage.database import Connection, Database
from payorch.storage.database_thread import on_database_thread
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, eventually, new_shop, post_json
from tests.reconciliation.test_sandbox_runs import paid_session, today

_NAME = f"payorch {RUN_CONNECTION}"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The sandbox settles the day it is paid, and runs rest long after each batch (a small share of
    the server's time), so that a test finds one under way."""
    reconciliation = settings.reconciliation.model_copy(update={"time_share": 0.01})
    providers = ProviderSettings(sandbox=SandboxSettings(settlement_lag_days=0))
    return settings.model_copy(update={"providers": providers, "reconciliation": reconciliation})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


@on_database_thread
async def _run_backends(conn: Connection) -> list[int]:
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
        _NAME,
    )
    return [row["pid"] for row in rows]


@on_database_thread
async def _terminate(conn: Connection, pid: int) -> None:
    await conn.execute("SELECT pg_terminate_backend($1)", pid)


@on_database_thread
async def _item_count(conn: Connection, run_id: uuid.UUID) -> int:
    count: int = await conn.fetchval("SELECT count(*) FROM reconciliation_items WHERE run_id = $1", run_id)
    return count


async def _run_backend(db: Database) -> int:
    """The backend of the run under way, once it has opened its connection."""

    async def opened() -> list[int] | None:
        return await db.autocommit(_run_backends) or None

    (backend,) = await eventually(opened)
    return backend


async def _start(client: Client, shop: Shop, day: str) -> str:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations"
    started = await post_json(
        client, path, {"provider": "sandbox", "from": day, "to": day}, shop.merchant.headers
    )
    assert started.status_code == 202, await started.get_data(as_text=True)
    return str((await started.get_json())["id"])


async def _ended(client: Client, shop: Shop, run_id: str) -> dict[str, Any]:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations/{run_id}?limit=100"

    async def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = await (await client.get(path, headers=shop.merchant.headers)).get_json()
        return body if body["status"] != "RUNNING" else None

    return await eventually(ended, 30)


async def test_a_run_reads_and_writes_on_a_backend_of_its_own_at_the_least_priority(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    run_id = await _start(client, shop, today(clock))
    backend = await _run_backend(db)
    # The embedded PostgreSQL runs here as this user: the run's backend is lowered.
    assert os.getpriority(os.PRIO_PROCESS, backend) == BACKEND_NICENESS
    run = await _ended(client, shop, run_id)
    assert run["status"] == "COMPLETED" and run["counts"]["MATCHED"] == 1
    assert await db.autocommit(_run_backends) == []  # closed with the run


async def test_a_run_that_loses_its_connection_ends_failed_whole_and_the_account_runs_again(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    session_id = await paid_session(client, shop)
    run_id = await _start(client, shop, today(clock))
    backend = await _run_backend(db)
    await db.autocommit(_terminate, backend)
    failed = await _ended(client, shop, run_id)
    assert failed["status"] == "FAILED" and failed["error"].startswith("the run failed")
    # Each batch's items are one statement: the run kept none or all of its one batch.
    assert await db.autocommit(_item_count, uuid.UUID(run_id)) in (0, 1)
    again = await _ended(client, shop, await _start(client, shop, today(clock)))
    assert again["status"] == "COMPLETED"
    assert [item["sessionId"] for item in again["items"]["items"]] == [session_id]
    assert again["counts"]["MATCHED"] == 1
