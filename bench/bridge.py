"""`python -m bench.bridge`: what one crossing between Trio and asyncpg costs, bridge against bridge.

payorch's code runs on Trio and asyncpg runs on asyncio; every unit of work (`Database.autocommit`,
`Database.transaction`) crosses between the two once. This measures the same units of work through:

- `trio_asyncio`: asyncpg on a trio_asyncio loop inside the Trio thread, one `aio_as_trio` per unit
  (how payorch talked to PostgreSQL before `docs/bridge.md`). payorch no longer depends on
  trio_asyncio: this bridge is measured only where it is installed (`pip install trio-asyncio`);
- `thread/asyncio`, `thread/uvloop`: asyncpg on an asyncio (or uvloop) loop in a thread of its own,
  one handoff per unit (`payorch.storage.database.open_database`, given each loop).

Units: a one-statement read (`Database.autocommit`), and a transaction of two statements
(`Database.transaction`: BEGIN, a row locked, an event inserted, COMMIT), each at 1 and at 32
concurrent callers. For each: units/s, latency p50/p99, and CPU seconds of this process per 1000 units
(the server is CPU-bound, so CPU per unit is what matters most). CPU is of this process only (both its
threads); PostgreSQL's own is not in it.

Everything runs against an embedded PostgreSQL under a temporary directory, on loopback. The
measured windows are interleaved (every bridge in each round, in a rotating order) and repeated,
because a two-core machine shared with other work is noisy: compare bridges within a run, and run
it more than once. Bounded in time: rounds x cases x bridges x (warm-up + window), about 2 minutes
with the defaults. Figures go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import trio

from bench.payorch_target import temporary_postgres
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, LoopFactory, open_database

try:
    import trio_asyncio  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    trio_asyncio = None
from payorch.storage.embedded import start_embedded_postgres

ROWS = 10_000
# asyncpg passes query parameters it does not know as server settings: no fsync wait per commit, so
# that the disk (shared with other work on this machine) does not blur what the bridge costs.
BENCH_DSN_OPTIONS = "synchronous_commit=off"
POOL_SIZE = 16
CONCURRENCIES = (1, 32)
# In-flight units get this long to finish after a window closes before the run gives up.
STRAGGLER_DEADLINE_S = 30.0


class Bridged(Protocol):
    async def autocommit(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any: ...
    async def transaction(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any: ...


class TrioAsyncioDatabase:
    """asyncpg on the trio_asyncio loop, one `aio_as_trio` crossing per unit of work."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def autocommit(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async def on_connection() -> Any:
            async with self._pool.acquire() as conn:
                return await unit(conn, *args)

        return await trio_asyncio.aio_as_trio(on_connection)()

    async def transaction(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async def in_transaction() -> Any:
            async with self._pool.acquire() as conn, conn.transaction():
                return await unit(conn, *args)

        return await trio_asyncio.aio_as_trio(in_transaction)()


async def _exact_json_codecs(conn: Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=dumps_exact, decoder=loads_exact, schema="pg_catalog", format="text"
        )


async def _keep_session_state(conn: Connection) -> None:
    pass


@asynccontextmanager
async def open_trio_asyncio_database(dsn: str) -> AsyncIterator[Bridged]:
    """A pool on the running trio_asyncio loop, set up as payorch's own pool is."""
    pool = await trio_asyncio.aio_as_trio(asyncpg.create_pool)(
        dsn,
        min_size=POOL_SIZE,
        max_size=POOL_SIZE,
        command_timeout=60,
        init=_exact_json_codecs,
        reset=_keep_session_state,
    )
    try:
        yield TrioAsyncioDatabase(pool)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await trio_asyncio.aio_as_trio(pool.close)()


@asynccontextmanager
async def open_thread_database(dsn: str, loop_factory: LoopFactory) -> AsyncIterator[Bridged]:
    """payorch's own pool: asyncpg on a `loop_factory()` loop in a thread of its own."""
    async with open_database(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, loop_factory=loop_factory) as db:
        yield db


def _thread_bridges() -> dict[str, Callable[[str], AbstractAsyncContextManager[Bridged]]]:
    bridges: dict[str, Callable[[str], AbstractAsyncContextManager[Bridged]]] = {
        "thread/asyncio": partial(open_thread_database, loop_factory=asyncio.SelectorEventLoop),
    }
    try:
        import uvloop
    except ImportError:
        print("uvloop is not installed: thread/uvloop left out", file=sys.stderr)
    else:
        bridges["thread/uvloop"] = partial(open_thread_database, loop_factory=uvloop.Loop)
    return bridges


# The units of work measured: asyncio coroutines that take a connection, as payorch's storage has.
async def read_row(conn: Connection, row_id: int) -> Any:
    return await conn.fetchrow("SELECT id, version, payload FROM bridge_rows WHERE id = $1", row_id)


async def lock_row_and_add_event(conn: Connection, row_id: int) -> None:
    version = await conn.fetchval("SELECT version FROM bridge_rows WHERE id = $1 FOR UPDATE", row_id)
    await conn.execute(
        "INSERT INTO bridge_events (row_id, version, payload) VALUES ($1, $2, $3)",
        row_id,
        version,
        {"type": "bench.event", "rowId": row_id},
    )


async def _create_tables(conn: Connection) -> None:
    await conn.execute(
        """CREATE TABLE bridge_rows (id int PRIMARY KEY, version int NOT NULL, payload jsonb NOT NULL);
        CREATE TABLE bridge_events (id bigserial PRIMARY KEY, row_id int NOT NULL, version int NOT NULL,
                                    payload jsonb NOT NULL)"""
    )
    await conn.executemany(
        "INSERT INTO bridge_rows (id, version, payload) VALUES ($1, 1, $2)",
        [(row_id, {"rowId": row_id, "status": "PENDING", "amount": "100.00"}) for row_id in range(ROWS)],
    )


@dataclass(frozen=True)
class Case:
    unit: str  # "read" or "transaction"
    concurrency: int

    @property
    def label(self) -> str:
        statements = "1-statement read" if self.unit == "read" else "BEGIN + 2 + COMMIT"
        return f"{statements}, concurrency {self.concurrency}"


@dataclass(frozen=True)
class Window:
    """One measured window of one bridge on one case."""

    bridge: str
    case: Case
    units: int
    seconds: float
    cpu_s: float
    latencies_ms: list[float]

    @property
    def units_per_s(self) -> float:
        return self.units / self.seconds

    @property
    def cpu_ms_per_unit(self) -> float:
        # CPU seconds per 1000 units is the same number as CPU milliseconds per unit.
        return 1000 * self.cpu_s / self.units if self.units else float("nan")

    def percentile(self, percent: int) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


async def measure(db: Bridged, bridge: str, case: Case, warmup_s: float, measured_s: float) -> Window:
    """`case.concurrency` callers running `case.unit` one after another through `db`; counted are
    the units that end inside the measured window."""
    latencies: list[float] = []
    counting = False
    stop = False

    async def caller(seed: int) -> None:
        rows = random.Random(seed)  # noqa: S311 - which row a unit touches, not a secret
        while not stop:
            row_id = rows.randrange(ROWS)
            started = time.perf_counter()
            if case.unit == "read":
                await db.autocommit(read_row, row_id)
            else:
                await db.transaction(lock_row_and_add_event, row_id)
            if counting:
                latencies.append(1000 * (time.perf_counter() - started))

    async with trio.open_nursery() as nursery:
        for seed in range(case.concurrency):
            nursery.start_soon(caller, seed)
        await trio.sleep(warmup_s)
        counting = True
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        await trio.sleep(measured_s)
        counting = False
        cpu_s, seconds = time.process_time() - cpu_before, time.perf_counter() - wall_before
        stop = True
        nursery.cancel_scope.deadline = trio.current_time() + STRAGGLER_DEADLINE_S
    return Window(bridge, case, len(latencies), seconds, cpu_s, latencies)


def _print_summary(windows: list[Window], bridges: list[str], cases: list[Case]) -> None:
    baseline = bridges[0]
    print()
    print(f"median over rounds; CPU = this process's CPU seconds per 1000 units; x = against {baseline}")
    header = f"{'bridge':<16}{'units/s':>10}{'x':>7}{'p50 ms':>9}{'p99 ms':>9}{'CPU s/1000':>12}{'x':>7}"
    for case in cases:
        print()
        print(case.label)
        print(header)
        medians: dict[str, tuple[float, float, float, float]] = {}
        for bridge in bridges:
            runs = [w for w in windows if w.bridge == bridge and w.case == case]
            medians[bridge] = (
                statistics.median(w.units_per_s for w in runs),
                statistics.median(w.percentile(50) for w in runs),
                statistics.median(w.percentile(99) for w in runs),
                statistics.median(w.cpu_ms_per_unit for w in runs),
            )
        for bridge in bridges:
            rate, p50, p99, cpu = medians[bridge]
            base_rate, _, _, base_cpu = medians[baseline]
            print(
                f"{bridge:<16}{rate:>10.0f}{rate / base_rate:>7.2f}{p50:>9.2f}{p99:>9.2f}"
                f"{cpu:>12.3f}{cpu / base_cpu:>7.2f}"
            )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bridge", description="trio_asyncio against asyncpg on a thread of its own"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each measuring every bridge (3)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measured window (default 2)")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured warm-up per window (0.5)")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> None:
    cases = [Case(unit, concurrency) for unit in ("read", "transaction") for concurrency in CONCURRENCIES]
    with tempfile.TemporaryDirectory(prefix="payorch-bench-bridge-") as work_dir:
        pgdata = Path(work_dir) / "pgdata"
        async with temporary_postgres(pgdata), AsyncExitStack() as stack:
            url = await start_embedded_postgres(pgdata)
            dsn = url + ("&" if "?" in url else "?") + BENCH_DSN_OPTIONS
            print(f"PostgreSQL at {dsn}", file=sys.stderr)
            openers: dict[str, Callable[[str], AbstractAsyncContextManager[Bridged]]] = {}
            if trio_asyncio is None:
                print("trio_asyncio is not installed: its bridge left out", file=sys.stderr)
            else:
                await stack.enter_async_context(trio_asyncio.open_loop())
                openers["trio_asyncio"] = open_trio_asyncio_database
            openers.update(_thread_bridges())
            bridges = list(openers)
            dbs = {name: await stack.enter_async_context(open(dsn)) for name, open in openers.items()}
            await dbs[bridges[0]].autocommit(_create_tables)
            windows: list[Window] = []
            for round_number in range(args.rounds):
                for case in cases:
                    # A rotating order: no bridge always measured first, or right after another.
                    shift = round_number % len(bridges)
                    for bridge in bridges[shift:] + bridges[:shift]:
                        window = await measure(dbs[bridge], bridge, case, args.warmup, args.seconds)
                        windows.append(window)
                        print(
                            f"round {round_number + 1}/{args.rounds} {case.label:<36} {bridge:<15}"
                            f"{window.units_per_s:>8.0f} units/s  p50 {window.percentile(50):6.2f} ms  "
                            f"p99 {window.percentile(99):6.2f} ms  CPU {window.cpu_ms_per_unit:.3f} s/1000",
                            file=sys.stderr,
                        )
            _print_summary(windows, bridges, cases)


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    trio_asyncio_version = "not installed" if trio_asyncio is None else trio_asyncio.__version__
    print(
        f"python {sys.version.split()[0]}, asyncpg {asyncpg.__version__}, trio {trio.__version__}, "
        f"trio_asyncio {trio_asyncio_version}; {args.rounds} rounds of {args.seconds} s windows"
    )
    trio.run(_main, args)


if __name__ == "__main__":
    main()
