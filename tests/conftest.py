"""Test fixtures: a real PostgreSQL, a migrated template, and for each test a database as the template
has it: the test process's reused copy, emptied before the test, or a copy of its own
(tests/databases.py).

The server is embedded (pgserver) unless PAYORCH_TEST_DATABASE_URL names one to use instead. Under
pytest-xdist each worker has a server (or, on an external one, a template) of its own, so workers never
contend for one template. The embedded server keeps its files in memory (/dev/shm) when it can, and
runs without fsync: it only ever holds test data, and cloning a database is then a copy in memory
instead of a wait for the disk.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import trio

from payorch.config import (
    AuthSettings,
    DatabaseSettings,
    ReconciliationSettings,
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
from tests.databases import POOL_MAX, POOL_MIN, ReusedDatabase, TestDatabases, database_url
from tests.helpers import Client, Merchant, new_merchant
from tests.termination import ended_with_this_process

# The browser tests' fixtures (live_service, browser) and hooks, for tests of any folder.
pytest_plugins = ("tests.browser.plugin", "tests.leftovers")

# Each pytest-xdist worker ("gw0", "gw1"...) clones from a template of its own: CREATE DATABASE fails
# while another session is connected to its template, so two workers must never share one.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
TEMPLATE = f"payorch_test_template_{WORKER}"
# What durability costs and a throwaway test server does not need; none changes what a query sees.
_EMBEDDED_SETTINGS = {"fsync": "off", "full_page_writes": "off", "autovacuum": "off"}
_SHARED_MEMORY = "/dev/shm"  # noqa: S108 - the server's directory in it is made by mkdtemp
TEST_JWT_SECRET = "test-jwt-secret-0123456789abcdefghijklmnop"
TEST_ENCRYPTION_KEY = "S2vYjcy6bBtRN0mTGqkLVxr40z2HDG5cf7rjzmoAPpM="


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "long: runs for seconds (whole payorch processes, servers, the fuzzer): run first"
    )
    config.addinivalue_line(
        "markers",
        "fresh_database: runs on a database of its own, never used before, not on the reused one "
        "(tests/databases.py): for a test of what depends on a table's past, such as the pages read",
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
    pytest's own process, as without xdist) when the command names tests of one file, else one more
    than the CPUs: a test sometimes waits (on a subprocess, a timer) and another then runs. On 2
    cores, with each test process reusing one database (tests/databases.py), 3 workers ran the suite
    in 249, 301 and 291 s where 4 took 253, 329 and 311 s right beside them, and 10% less CPU.
    PYTEST_XDIST_AUTO_NUM_WORKERS, or `-n <count>`, still chooses."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    named = {config.invocation_params.dir / arg.split("::")[0] for arg in config.args}
    if len(named) == 1 and next(iter(named)).is_file():
        return 0
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity else os.cpu_count() or 1
    return cpus + 1


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
    with ended_with_this_process(server.cleanup):
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


@pytest.fixture(scope="session")
def test_databases(
    postgres_server: str, template_database: str, clone_strategy: str
) -> Iterator[TestDatabases]:
    databases = TestDatabases(postgres_server, template_database, clone_strategy)
    yield databases
    databases.close()


@pytest.fixture(scope="session")
def reused_database(test_databases: TestDatabases) -> Iterator[ReusedDatabase | None]:
    """This test process's reused database (tests/databases.py), or None where the tests' role is
    no superuser: a database's triggers cannot be switched off to empty it."""
    if not test_databases.superuser():
        yield None
        return
    reused = ReusedDatabase(test_databases)
    yield reused
    reused.close()


@pytest.fixture
def database_dsn(postgres_server: str, test_databases: TestDatabases) -> Iterator[str]:
    """A fresh, migrated database for this test alone, dropped afterwards: for a test that hands it
    to processes or changes the database itself. Other tests' `settings` name the reused one."""
    name = test_databases.take()
    yield database_url(postgres_server, name)
    test_databases.drop(name)


@pytest.fixture
def test_database_url(request: pytest.FixtureRequest, reused_database: ReusedDatabase | None) -> str:
    """The database of the test's `settings`: its own fresh one when it asks for `database_dsn` or is
    marked `fresh_database` (or no database can be reused), else the reused one, emptied back to the
    template."""
    fresh = "database_dsn" in request.fixturenames or request.node.get_closest_marker("fresh_database")
    if reused_database is None or fresh:
        return str(request.getfixturevalue("database_dsn"))
    return reused_database.url()


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
        # No daily reconciliation runs starting by themselves beside a test (they would after
        # `run_at_utc`): tests/reconciliation/test_daily_runs.py asks for them.
        reconciliation=ReconciliationSettings(daily=False),
    )


@pytest.fixture
def settings(base_settings: Settings, test_database_url: str, tmp_path: Path) -> Settings:
    """`base_settings` with the test's own database and state directory (each section validated as
    it is built; `Settings` has no check across sections that the copy would skip)."""
    return base_settings.model_copy(
        update={
            "server": ServerSettings(bind="127.0.0.1:0", state_dir=tmp_path / "var"),
            "database": DatabaseSettings(url=test_database_url, pool_min=POOL_MIN, pool_max=POOL_MAX),
        }
    )


@pytest.fixture
async def db(settings: Settings, reused_database: ReusedDatabase | None) -> AsyncIterator[Database]:
    """The test's database: over the reused database's pool, open from test to test, or a pool of its
    own on the test's fresh database."""
    if reused_database is not None and reused_database.uses(settings.database.url):
        yield reused_database.database()
        return
    async with open_database(settings.database.url, min_size=POOL_MIN, max_size=POOL_MAX) as database:
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
