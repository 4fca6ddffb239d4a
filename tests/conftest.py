"""Test fixtures: a real PostgreSQL, a migrated template, and a fresh database cloned for each test.

The server is embedded (pgserver) unless PAYORCH_TEST_DATABASE_URL names one to use instead.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import trio
import trio_asyncio

from payorch.config import (
    AuthSettings,
    DatabaseSettings,
    SecuritySettings,
    ServerSettings,
    Settings,
    WebhookSettings,
)
from payorch.http.context import PayorchApp
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database, open_database
from payorch.storage.migrations import migrate
from tests.helpers import Client, Merchant, new_merchant

TEMPLATE = "payorch_test_template"
TEST_JWT_SECRET = "test-jwt-secret-0123456789abcdefghijklmnop"
TEST_ENCRYPTION_KEY = "S2vYjcy6bBtRN0mTGqkLVxr40z2HDG5cf7rjzmoAPpM="


def database_url(server_url: str, database: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def _admin(server_url: str, sql: str) -> None:
    conn = await asyncpg.connect(database_url(server_url, "postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """URL of a PostgreSQL server for the whole run (its `postgres` database)."""
    if os.environ.get("PAYORCH_TEST_DATABASE_URL"):
        yield os.environ["PAYORCH_TEST_DATABASE_URL"]
        return
    import pgserver

    # Not under pytest's rotating temp directory: a concurrent run could delete it under us.
    data_dir = Path(tempfile.mkdtemp(prefix="payorch-test-pg-"))
    server = pgserver.get_server(data_dir, cleanup_mode="delete")
    yield str(server.get_uri("postgres"))
    server.cleanup()


@pytest.fixture(scope="session")
def template_database(postgres_server: str) -> str:
    """A database with every migration applied, cloned by each test."""
    asyncio.run(_admin(postgres_server, f"DROP DATABASE IF EXISTS {TEMPLATE}"))
    asyncio.run(_admin(postgres_server, f"CREATE DATABASE {TEMPLATE}"))

    async def apply() -> None:
        async with (
            trio_asyncio.open_loop(),
            open_database(database_url(postgres_server, TEMPLATE), min_size=1, max_size=1) as db,
        ):
            await migrate(db)

    trio.run(apply)
    return TEMPLATE


@pytest.fixture
def database_dsn(postgres_server: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database for one test, dropped afterwards."""
    name = f"payorch_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(postgres_server, f"CREATE DATABASE {name} TEMPLATE {template_database}"))
    yield database_url(postgres_server, name)
    asyncio.run(_admin(postgres_server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def settings(database_dsn: str, tmp_path: Path) -> Settings:
    return Settings(
        server=ServerSettings(bind="127.0.0.1:0", state_dir=tmp_path / "var"),
        database=DatabaseSettings(url=database_dsn, pool_min=1, pool_max=4),
        auth=AuthSettings(jwt_secret=TEST_JWT_SECRET),
        security=SecuritySettings(encryption_key=TEST_ENCRYPTION_KEY),
        webhooks=WebhookSettings(allow_private_networks=True),
    )


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    async with (
        trio_asyncio.open_loop(),
        open_database(settings.database.url, min_size=1, max_size=4) as database,
    ):
        yield database


@pytest.fixture
async def runtime(settings: Settings, db: Database) -> AsyncIterator[Runtime]:
    """Services, the app and the background tasks (actors, supervisors), as the service runs them."""
    async with open_runtime(settings, db) as running:
        yield running


@pytest.fixture
def app(runtime: Runtime) -> PayorchApp:
    return runtime.app


@pytest.fixture
def client(app: PayorchApp) -> Client:
    return app.test_client()


@pytest.fixture
async def merchant(client: Client, db: Database, settings: Settings) -> Merchant:
    return await new_merchant(client, db, settings)
