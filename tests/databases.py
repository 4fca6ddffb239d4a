"""Each test's database, as the migrated template has it.

Two kinds:
- `TestDatabases`: a fresh copy of the template (`CREATE DATABASE ... TEMPLATE`) for one test, dropped
  after it. For the tests that ask for `database_dsn` themselves (they hand it to processes, or change
  the database itself), and for every test where the tests' role is no superuser.
- `ReusedDatabase`: one copy per test process, emptied back to the template before each test that
  uses it, its pool kept open from test to test. Cloning and dropping a database cost PostgreSQL about
  30 ms of CPU per test, and each test's new connections another 20 ms or more: a new server process
  knows none of the catalog rows its first statements need, and asyncpg prepares each statement again.
  Checking and emptying one costs PostgreSQL about 7 ms of CPU.

Before a test, the reused database is emptied, or replaced by a new copy when it cannot be:
- it is replaced when its catalogs differ from the template's (a fingerprint of the `pg_class`,
  `pg_attribute`, `pg_constraint`, `pg_proc`, `pg_trigger`... rows of its own objects: a table,
  column, constraint, function or trigger created, changed or dropped), or the rows the migrations wrote
  (`schema_migrations`), or something is set on the database itself (`ALTER DATABASE ... SET`),
  or a session other than the pool's stays on it, or its loop thread stopped;
- else every table's rows are deleted (triggers off: nothing counts or notifies) and every sequence
  set back to where the template has it, in one transaction. Not `TRUNCATE`: it makes new files for
  every table and index, and each pooled connection then reads their catalog rows again, which cost
  more than cloning a database.
A copy is replaced anyway after `REUSES` tests: deleted rows' space is not reclaimed (autovacuum is off
on the tests' server, and a `VACUUM` would give the planner statistics the template has not), so the
tables grow from test to test until then. A test sees a database equal to the template but for what no
query of payorch reads: the ids of deleted rows, pages holding them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import trio

from payorch.storage.database import Database, create_pool
from payorch.storage.loop_thread import LoopThread, default_loop_factory, run_until_stopped

T = TypeVar("T")

# The pool the `db` fixture opens, as the tests' settings say (`database.pool_min`, `pool_max`).
POOL_MIN, POOL_MAX = 1, 4
# How long a session left by a test (closing) may take to leave before the database is replaced.
_SESSIONS_LEAVE_S = 1.0
# How many tests use one copy of the template, at most.
REUSES = 50

# The rows of the catalogs that describe the database's own objects (16384 is PostgreSQL's first oid
# for those: the built-in ones are older), by count and row versions: a table, column, default,
# constraint, index, function, trigger, type, schema, sequence, view rule or policy created, changed
# or dropped changes it; and the rows the migrations wrote.
_FINGERPRINT = """
SELECT string_agg(format('%s:%s:%s', name, rows, versions), ' ' ORDER BY name) FROM (
    SELECT 'class' AS name, count(*) AS rows, sum(xmin::text::bigint) AS versions
        FROM pg_class WHERE oid >= 16384
    UNION ALL SELECT 'attribute', count(*), sum(xmin::text::bigint) FROM pg_attribute WHERE attrelid >= 16384
    UNION ALL SELECT 'attrdef', count(*), sum(xmin::text::bigint) FROM pg_attrdef WHERE oid >= 16384
    UNION ALL SELECT 'constraint', count(*), sum(xmin::text::bigint) FROM pg_constraint WHERE oid >= 16384
    UNION ALL SELECT 'index', count(*), sum(xmin::text::bigint) FROM pg_index WHERE indexrelid >= 16384
    UNION ALL SELECT 'proc', count(*), sum(xmin::text::bigint) FROM pg_proc WHERE oid >= 16384
    UNION ALL SELECT 'trigger', count(*), sum(xmin::text::bigint) FROM pg_trigger WHERE oid >= 16384
    UNION ALL SELECT 'type', count(*), sum(xmin::text::bigint) FROM pg_type WHERE oid >= 16384
    UNION ALL SELECT 'namespace', count(*), sum(xmin::text::bigint) FROM pg_namespace WHERE oid >= 16384
    UNION ALL SELECT 'sequence', count(*), sum(xmin::text::bigint) FROM pg_sequence WHERE seqrelid >= 16384
    UNION ALL SELECT 'rewrite', count(*), sum(xmin::text::bigint) FROM pg_rewrite WHERE oid >= 16384
    UNION ALL SELECT 'policy', count(*), sum(xmin::text::bigint) FROM pg_policy
    UNION ALL SELECT 'event_trigger', count(*), sum(xmin::text::bigint) FROM pg_event_trigger
    UNION ALL SELECT 'extension', count(*), sum(xmin::text::bigint) FROM pg_extension
    UNION ALL SELECT 'largeobject', count(*), 0 FROM pg_largeobject_metadata
    UNION ALL SELECT 'migrations ' || md5(string_agg(m::text, ',' ORDER BY m::text)), 0, 0
        FROM schema_migrations AS m
) AS catalogs
"""
# Whether the database has nothing set on it and no prepared transaction, and how many sessions other
# than the asking one are on it.
_STATE = """
SELECT NOT EXISTS (SELECT FROM pg_db_role_setting s WHERE s.setdatabase = d.oid)
       AND NOT EXISTS (SELECT FROM pg_prepared_xacts p WHERE p.database = d.datname)
       AND d.datallowconn AS plain,
       (SELECT count(*) FROM pg_stat_activity a WHERE a.datname = d.datname
        AND a.pid <> pg_backend_pid()) AS others
FROM pg_database d WHERE d.datname = current_database()
"""
_TABLES = """
SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
WHERE schemaname NOT IN ('pg_catalog', 'information_schema') AND tablename <> 'schema_migrations'
ORDER BY 1
"""
_SEQUENCES = """
SELECT format('%I.%I', schemaname, sequencename), start_value FROM pg_sequences
WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1
"""


def database_url(server_url: str, database: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{database}"))


class _LoopInThread:
    """An asyncio event loop (payorch's choice: uvloop where installed) running in a thread of its
    own until `close`, as payorch runs the database's (`loop_thread.run_until_stopped`); `on_stop`
    is called in that thread, with what escaped the loop if anything did, if it stops by itself."""

    def __init__(self, name: str, on_stop: Callable[[BaseException | None], None] | None = None) -> None:
        self.loop = default_loop_factory()()
        self._on_stop = on_stop
        self.closing = False
        self._thread = threading.Thread(
            target=run_until_stopped, args=(self.loop, self._stopped), name=name, daemon=True
        )
        self._thread.start()

    def _stopped(self, escaped: BaseException | None) -> None:
        if not self.closing and self._on_stop is not None:
            self._on_stop(escaped)

    def submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self.loop.is_running()

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(RuntimeError):  # closed: it stopped by itself
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


class TestDatabases:
    """Fresh databases cloned from the template, by one connection to the server on a thread of its
    own: the next test's database is cloned while this one runs, and each is dropped after its test
    without the test waiting. A test then spends no time on either, nor on connecting to do them."""

    __test__ = False  # not a test class, for pytest

    def __init__(self, server_url: str, template: str, strategy: str) -> None:
        self.server_url = server_url
        self._template, self._strategy = template, strategy
        self._thread = _LoopInThread("test databases")
        self._conn: asyncpg.Connection = self._thread.submit(self._connect(server_url)).result()
        self._statements = self._thread.submit(self._lock()).result()
        self._drops: list[concurrent.futures.Future[None]] = []
        self._next = self._thread.submit(self._clone())

    @staticmethod
    async def _connect(server_url: str) -> asyncpg.Connection:
        return await asyncpg.connect(database_url(server_url, "postgres"))

    @staticmethod
    async def _lock() -> asyncio.Lock:
        return asyncio.Lock()  # made on the thread's loop: one statement at a time on the connection

    async def _execute(self, sql: str) -> None:
        async with self._statements:
            await self._conn.execute(sql)

    async def _clone(self) -> str:
        name = f"payorch_test_{uuid.uuid4().hex[:12]}"
        await self._execute(f"CREATE DATABASE {name} TEMPLATE {self._template} {self._strategy}")
        return name

    async def _superuser(self) -> bool:
        async with self._statements:
            return bool(
                await self._conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            )

    def superuser(self) -> bool:
        """Whether the tests' role is a superuser here (it can switch a database's triggers off)."""
        return self._thread.submit(self._superuser()).result()

    def take(self) -> str:
        """The name of a fresh database, a copy of the template, for the caller alone."""
        name = self._next.result()
        self._next = self._thread.submit(self._clone())
        return name

    def drop(self, name: str) -> None:
        """Drop `name` soon (its connections ended by force); `close` raises if that failed."""
        self._drops = [drop for drop in self._drops if not drop.done() or drop.exception()]
        self._drops.append(self._thread.submit(self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")))

    def close(self) -> None:
        self.drop(self._next.result())
        try:
            for drop in self._drops:
                drop.result()
        finally:
            self._thread.submit(self._conn.close()).result()
            self._thread.close()


@dataclass
class _Template:
    """What a copy of the template looks like, and how to empty one back to it."""

    fingerprint: str
    emptying: str


class _Copy:
    """One copy of the template, with its pool and a connection of its own (to check and empty it),
    on an event loop in a thread of its own."""

    def __init__(self, name: str, url: str, on_stop: Callable[[BaseException | None], None]) -> None:
        self.name, self.url = name, url
        self.thread = _LoopInThread(f"reused database {name}", on_stop)
        self.pool: asyncpg.Pool = self.ask(create_pool(url, min_size=POOL_MIN, max_size=POOL_MAX))
        self.conn: asyncpg.Connection = self.ask(asyncpg.connect(url))
        self.uses = 0

    def ask(self, work: Coroutine[Any, Any, T]) -> T:
        return self.thread.submit(work).result()

    def close(self) -> None:
        if self.thread.running:
            with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                self.ask(_close(self.pool, self.conn))
        self.thread.close()


async def _close(pool: asyncpg.Pool, conn: asyncpg.Connection) -> None:
    try:
        await asyncio.wait_for(pool.close(), 5)
    except TimeoutError:
        pool.terminate()
    await conn.close()


async def _describe(conn: asyncpg.Connection) -> _Template:
    tables = [row[0] for row in await conn.fetch(_TABLES)]
    sequences = await conn.fetch(_SEQUENCES)
    statements = ["SET LOCAL session_replication_role = replica"]  # no trigger, no foreign-key check
    statements += [f"DELETE FROM {table}" for table in tables]  # noqa: S608 - names from pg_tables
    statements += [f"SELECT setval('{name}', {start}, false)" for name, start in sequences]
    return _Template(fingerprint=await conn.fetchval(_FINGERPRINT), emptying="; ".join(statements))


class ReusedDatabase:
    """One copy of the template for this test process, emptied before each test that uses it (see
    the module's text), its pool open from test to test. `Database`s over that pool are made per test
    (`database`): each with its test's Trio run, its own wake-up and counters."""

    def __init__(self, databases: TestDatabases) -> None:
        self._databases = databases
        self._template: _Template | None = None
        self._copy: _Copy | None = None
        # The test's LoopThread: told when the copy's loop stops under it, as `open_database`'s is.
        self._current: LoopThread | None = None

    def url(self) -> str:
        """The copy's URL, the copy emptied back to the template (or a new copy) for the caller."""
        if self._copy is not None and not self._emptied(self._copy):
            self._replace()
        if self._copy is None:
            self._copy = self._new_copy()
        return self._copy.url

    def uses(self, url: str) -> bool:
        return self._copy is not None and self._copy.url == url

    def database(self) -> Database:
        """A `Database` over the copy's pool, for the running Trio run (the test's)."""
        assert self._copy is not None
        self._current = LoopThread(self._copy.thread.loop, trio.lowlevel.current_trio_token())
        return Database(self._copy.pool, self._copy.url, self._current)

    def _new_copy(self) -> _Copy:
        name = self._databases.take()
        copy = _Copy(name, database_url(self._databases.server_url, name), self._loop_stopped)
        if self._template is None:
            self._template = copy.ask(_describe(copy.conn))
        return copy

    def _loop_stopped(self, escaped: BaseException | None) -> None:  # in the copy's thread, by itself
        current = self._current
        if current is not None:
            with contextlib.suppress(trio.RunFinishedError):  # the test's run is over
                current.token.run_sync_soon(current.loop_stopped, escaped)

    def _replace(self) -> None:
        assert self._copy is not None
        copy, self._copy = self._copy, None
        copy.close()
        self._databases.drop(copy.name)

    def _emptied(self, copy: _Copy) -> bool:
        """Whether `copy` could be emptied back to the template (and was)."""
        copy.uses += 1
        if copy.uses >= REUSES or not copy.thread.running or copy.conn.is_closed():
            return False
        try:
            return copy.ask(self._empty(copy))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):  # the test dropped it, say
            return False

    async def _empty(self, copy: _Copy) -> bool:
        """Empty `copy` back to the template; False if it cannot be (see the module's text)."""
        assert self._template is not None
        conn = copy.conn
        for _ in range(int(_SESSIONS_LEAVE_S / 0.01)):
            plain, others = await conn.fetchrow(_STATE)
            if not plain:
                return False
            if others <= copy.pool.get_size():
                break
            await asyncio.sleep(0.01)
        else:
            return False
        if await conn.fetchval(_FINGERPRINT) != self._template.fingerprint:
            return False
        async with conn.transaction():
            await conn.execute(self._template.emptying)
        return True

    def close(self) -> None:
        if self._copy is not None:
            self._replace()
