"""Test fixtures: a real PostgreSQL, a migrated template, and a fresh database cloned for each test.

The server is embedded (pgserver) unless PAYORCH_TEST_DATABASE_URL names one to use instead. Under
pytest-xdist each worker has a server (or, on an external one, a template) of its own, so workers never
contend for one template. The embedded server keeps its files in memory (/dev/shm) when it can, and
runs without fsync: it only ever holds test data, and cloning a database for each test is then a copy in
memory instead of a wait for the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import trio

from payorch.config import (
    AuthSettings,
    DatabaseSettings,
    RoutingSettings,
    SecuritySettings,
    ServerSettings,
    Settings,
    WebhookSettings,
)
from payorch.http.services import PayorchApp
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database, open_database
from payorch.storage.migrations import migrate
from tests import argon2_memo, route_memo
from tests.clock import ShiftedClock
from tests.helpers import Client, Merchant, new_merchant

# The browser tests' fixtures (live_service, browser) and hooks, for tests of any folder.
pytest_plugins = ("tests.browser.plugin",)

# Each pytest-xdist worker ("gw0", "gw1"...) clones from a template of its own: CREATE DATABASE fails
# while another session is connected to its template, so two workers must never share one.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
TEMPLATE = f"payorch_test_template_{WORKER}"
# What durability costs and a throwaway test server does not need; none changes what a query sees.
_EMBEDDED_SETTINGS = {"fsync": "off", "full_page_writes": "off", "autovacuum": "off"}
_SHARED_MEMORY = "/dev/shm"  # noqa: S108 - the server's directory in it is made by mkdtemp
T = TypeVar("T")
TEST_JWT_SECRET = "test-jwt-secret-0123456789abcdefghijklmnop"
TEST_ENCRYPTION_KEY = "S2vYjcy6bBtRN0mTGqkLVxr40z2HDG5cf7rjzmoAPpM="


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "long: runs for seconds (whole payorch processes, servers, the fuzzer): run first"
    )
    # Each password's argon2 computed once per test process, not in every test (tests/argon2_memo.py).
    argon2_memo.install()
    # Each URL rule compiled once per test process, not in every test's app (tests/route_memo.py).
    route_memo.install()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """The collection (every test module imported, every test made) with the garbage collector
    paused: what it makes lives as long as the test process, and is frozen once it is done."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the imports and the collection made lives as long as the test process: frozen out of the
    garbage collector's sight (`gc.freeze`), each full collection walks the tests' own objects only,
    not some 150,000 more. Such collections were half of what building each test's app cost."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)  # after the browser plugin has marked its tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests (marked `long` or `browser`) first, each file's in its order: pytest-xdist hands
    the tests out one at a time (`--maxschedchunk 1`, pyproject.toml), so every worker starts on a
    long one and the short ones fill in after, instead of a worker left alone with one at the end."""
    items.sort(key=lambda item: not any(item.iter_markers("long")) and not any(item.iter_markers("browser")))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many pytest-xdist workers `-n auto` (pyproject.toml's default) starts: none (the tests run in
    pytest's own process, as without xdist) when the command names tests of one file, else two more
    than the CPUs: a test often waits (on PostgreSQL, a subprocess, a timer) and another then runs.
    On 2 cores, 4 workers ran the suite in 390 s, 3 in 405 s and 6 in 422 s.
    PYTEST_XDIST_AUTO_NUM_WORKERS, or `-n <count>`, still chooses."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    named = {config.invocation_params.dir / arg.split("::")[0] for arg in config.args}
    if len(named) == 1 and next(iter(named)).is_file():
        return 0
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity else os.cpu_count() or 1
    return cpus + 2


def database_url(server_url: str, database: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def _admin(server_url: str, sql: str) -> None:
    conn = await asyncpg.connect(database_url(server_url, "postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _memory_directory() -> str | None:
    """The shared-memory tmpfs when it has room for a server (Docker's default 64 MB has not), else
    None (the system's temporary directory). In memory, a database is cloned in milliseconds; the
    server's own directory inside it is created private (mkdtemp)."""
    try:
        found = os.statvfs(_SHARED_MEMORY)
    except OSError:
        return None
    roomy = found.f_bavail * found.f_frsize >= 1 << 30
    return _SHARED_MEMORY if roomy and os.access(_SHARED_MEMORY, os.W_OK) else None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """URL of a PostgreSQL server for the whole run (its `postgres` database)."""
    if os.environ.get("PAYORCH_TEST_DATABASE_URL"):
        yield os.environ["PAYORCH_TEST_DATABASE_URL"]
        return
    import pgserver

    # Not under pytest's rotating temp directory: a concurrent run could delete it under us.
    data_dir = Path(tempfile.mkdtemp(prefix=f"payorch-test-pg-{WORKER}-", dir=_memory_directory()))
    server = pgserver.get_server(data_dir, cleanup_mode="delete")
    url = str(server.get_uri("postgres"))
    for name, value in _EMBEDDED_SETTINGS.items():  # one by one: ALTER SYSTEM refuses a transaction
        asyncio.run(_admin(url, f"ALTER SYSTEM SET {name} = {value}"))
    asyncio.run(_admin(url, "SELECT pg_reload_conf()"))
    yield url
    server.cleanup()


@pytest.fixture(scope="session")
def template_database(postgres_server: str) -> str:
    """A database with every migration applied, cloned by each test."""
    asyncio.run(_admin(postgres_server, f"DROP DATABASE IF EXISTS {TEMPLATE}"))
    asyncio.run(_admin(postgres_server, f"CREATE DATABASE {TEMPLATE}"))

    async def apply() -> None:
        async with open_database(database_url(postgres_server, TEMPLATE), min_size=1, max_size=1) as db:
            await migrate(db)

    trio.run(apply)
    return TEMPLATE


@pytest.fixture(scope="session")
def clone_strategy(postgres_server: str) -> str:
    """How to clone the template: by copying its files (PostgreSQL 15 and later) rather than writing
    it all through the WAL, which is several times slower for a database this small."""

    async def version() -> int:
        conn = await asyncpg.connect(database_url(postgres_server, "postgres"))
        try:
            return int(await conn.fetchval("SHOW server_version_num"))
        finally:
            await conn.close()

    return "STRATEGY FILE_COPY" if asyncio.run(version()) >= 150000 else ""


class TestDatabases:
    """Fresh databases cloned from the template, by one connection to the server on a thread of its
    own: the next test's database is cloned while this one runs, and each is dropped after its test
    without the test waiting. A test then spends no time on either, nor on connecting to do them."""

    def __init__(self, server_url: str, template: str, strategy: str) -> None:
        self._template, self._strategy = template, strategy
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test databases", daemon=True)
        self._thread.start()
        self._conn: asyncpg.Connection = self._submit(self._connect(server_url)).result()
        self._statements = self._submit(self._lock()).result()
        self._drops: list[concurrent.futures.Future[None]] = []
        self._next = self._submit(self._clone())

    @staticmethod
    async def _connect(server_url: str) -> asyncpg.Connection:
        return await asyncpg.connect(database_url(server_url, "postgres"))

    @staticmethod
    async def _lock() -> asyncio.Lock:
        return asyncio.Lock()  # made on the thread's loop: one statement at a time on the connection

    def _submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    async def _execute(self, sql: str) -> None:
        async with self._statements:
            await self._conn.execute(sql)

    async def _clone(self) -> str:
        name = f"payorch_test_{uuid.uuid4().hex[:12]}"
        await self._execute(f"CREATE DATABASE {name} TEMPLATE {self._template} {self._strategy}")
        return name

    def take(self) -> str:
        """The name of a fresh database, a copy of the template, for the caller alone."""
        name = self._next.result()
        self._next = self._submit(self._clone())
        return name

    def drop(self, name: str) -> None:
        """Drop `name` soon (its connections ended by force); `close` raises if that failed."""
        self._drops = [drop for drop in self._drops if not drop.done() or drop.exception()]
        self._drops.append(self._submit(self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")))

    def close(self) -> None:
        self.drop(self._next.result())
        try:
            for drop in self._drops:
                drop.result()
        finally:
            self._submit(self._conn.close()).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


@pytest.fixture(scope="session")
def test_databases(
    postgres_server: str, template_database: str, clone_strategy: str
) -> Iterator[TestDatabases]:
    databases = TestDatabases(postgres_server, template_database, clone_strategy)
    yield databases
    databases.close()


@pytest.fixture
def database_dsn(postgres_server: str, test_databases: TestDatabases) -> Iterator[str]:
    """A fresh, migrated database for one test, dropped afterwards."""
    name = test_databases.take()
    yield database_url(postgres_server, name)
    test_databases.drop(name)


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    """What every test's settings share, read once per test process: building `Settings` reads the
    environment and `.env` files (pydantic-settings), about 3 ms that each test would spend again."""
    return Settings(
        auth=AuthSettings(jwt_secret=TEST_JWT_SECRET),
        security=SecuritySettings(encryption_key=TEST_ENCRYPTION_KEY),
        webhooks=WebhookSettings(allow_private_networks=True),
        # No exploration share: a session's provider would otherwise depend on its random id. The
        # tests of exploration ask for one.
        routing=RoutingSettings(exploration=0.0),
    )


@pytest.fixture
def settings(base_settings: Settings, database_dsn: str, tmp_path: Path) -> Settings:
    """`base_settings` with the test's own database and state directory (each section validated as
    it is built; `Settings` has no check across sections that the copy would skip)."""
    return base_settings.model_copy(
        update={
            "server": ServerSettings(bind="127.0.0.1:0", state_dir=tmp_path / "var"),
            "database": DatabaseSettings(url=database_dsn, pool_min=1, pool_max=4),
        }
    )


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    async with open_database(settings.database.url, min_size=1, max_size=4) as database:
        yield database


@pytest.fixture
def clock() -> ShiftedClock:
    """The runtime's clock: a test moves time forward with `clock.advance(seconds)`."""
    return ShiftedClock()


@pytest.fixture
async def runtime(settings: Settings, db: Database, clock: ShiftedClock) -> AsyncIterator[Runtime]:
    """Services, the app and the background tasks (actors, supervisors), as the service runs them,
    on a clock the test can move."""
    async with open_runtime(settings, db, clock) as running:
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
