"""`python -m bench.bridge`: what one crossing between Trio and asyncpg costs, design against design.

payorch's code runs on Trio and asyncpg runs on asyncio; every unit of work (`Database.autocommit`,
`Database.transaction`) crosses between the two once. This measures the same units of work through:

- `thread/uvloop` (payorch's), `thread/asyncio`: asyncpg on a uvloop (or asyncio) loop in a thread of
  its own, one handoff per unit (`payorch.storage.database.open_database`, given each loop);
- `guest/uvloop`: Trio in guest mode on a uvloop loop (`trio.lowlevel.start_guest_run`), asyncpg on
  that same loop and thread: a unit is an asyncio task created from Trio, whose end reschedules the
  Trio caller directly (`GuestDatabase`);
- `asyncio/uvloop`: no Trio at all, the callers are asyncio tasks on the pool's own uvloop loop: what
  asyncpg costs with no bridge, for reference;
- `trio_asyncio`: asyncpg on a trio_asyncio loop inside the Trio thread, one `aio_as_trio` per unit
  (how payorch talked to PostgreSQL before `docs/bridge.md`). payorch no longer depends on
  trio_asyncio: this design is measured only where it is installed (`pip install trio-asyncio`).

Units: `SELECT 1`, a one-statement read of a row (`Database.autocommit`), and a transaction of two
statements (`Database.transaction`: BEGIN, a row locked, an event inserted, COMMIT), each at 1 and at
32 concurrent callers. For each: units/s, latency p50/p99, and CPU seconds of this process per 1000
units (the server is CPU-bound, so CPU per unit is what matters most). CPU is of this process only
(all its threads); PostgreSQL's own is not in it.

Everything runs against an embedded PostgreSQL under a temporary directory. Each window is a run of
its own (a new event loop, or a new Trio run, and a new pool of the same settings, in a new thread),
so that every design starts alike and none runs under another's loop. The windows are interleaved
(every design in each round, in a rotating order) and repeated, because a two-core machine shared
with other work is noisy: compare designs within a run, and run it more than once. Bounded in time:
rounds x cases x designs x (warm-up + window + opening a pool), 3 to 4 minutes with the defaults.
Figures go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import outcome
import trio

from bench.payorch_target import temporary_postgres
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, LoopFactory, create_pool, open_database
from payorch.storage.embedded import start_embedded_postgres

try:
    import trio_asyncio  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    trio_asyncio = None
try:
    import uvloop
except ImportError:
    uvloop = None  # type: ignore[assignment]

ROWS = 10_000
# asyncpg passes query parameters it does not know as server settings: no fsync wait per commit, so
# that the disk (shared with other work on this machine) does not blur what the bridge costs.
BENCH_DSN_OPTIONS = "synchronous_commit=off"
POOL_SIZE = 16
CONCURRENCIES = (1, 32)
UNITS = ("select1", "read", "transaction")
# In-flight units get this long to finish after a window closes before the run gives up.
STRAGGLER_DEADLINE_S = 30.0
# What every other design is set against in the summary: payorch's own.
TODAY = "thread/uvloop"


class Bridged(Protocol):
    async def autocommit(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any: ...
    async def transaction(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any: ...


class PoolUnits:
    """A unit of work on a pool of the running asyncio loop, awaited where it is called: no bridge.
    What `asyncio/uvloop` calls directly, and what the other designs hand across."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def autocommit(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async with self._pool.acquire() as conn:
            return await unit(conn, *args)

    async def transaction(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async with self._pool.acquire() as conn, conn.transaction():
            return await unit(conn, *args)


class TrioAsyncioDatabase:
    """asyncpg on the trio_asyncio loop, one `aio_as_trio` crossing per unit of work."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._units = PoolUnits(pool)

    async def autocommit(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await trio_asyncio.aio_as_trio(self._units.autocommit)(unit, *args)

    async def transaction(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await trio_asyncio.aio_as_trio(self._units.transaction)(unit, *args)


class GuestDatabase:
    """asyncpg on the asyncio loop that Trio runs on as a guest, in the same thread: a unit is an
    asyncio task created from Trio, and the task's end reschedules the Trio caller directly (the
    host's callbacks may touch Trio's state: both loops take turns on one thread). A cancelled
    caller cancels the task and is woken once it has ended, as `LoopThread.run` does."""

    def __init__(self, pool: asyncpg.Pool, loop: asyncio.AbstractEventLoop) -> None:
        self._units = PoolUnits(pool)
        self._loop = loop

    async def _run(self, work: Coroutine[Any, Any, Any]) -> Any:
        await trio.lowlevel.checkpoint_if_cancelled()
        caller = trio.lowlevel.current_task()
        task = self._loop.create_task(work)
        raise_cancel: Callable[[], Any] | None = None

        def wake_caller(ended: asyncio.Task[Any]) -> None:  # a host callback, on the same thread
            if ended.cancelled() and raise_cancel is not None:
                trio.lowlevel.reschedule(caller, outcome.capture(raise_cancel))
            else:
                trio.lowlevel.reschedule(caller, outcome.capture(ended.result))

        def abort(raise_cancel_in_trio: Callable[[], Any]) -> trio.lowlevel.Abort:
            nonlocal raise_cancel
            raise_cancel = raise_cancel_in_trio
            task.cancel()
            return trio.lowlevel.Abort.FAILED  # the caller is woken when the task has ended

        task.add_done_callback(wake_caller)
        return await trio.lowlevel.wait_task_rescheduled(abort)

    async def autocommit(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await self._run(self._units.autocommit(unit, *args))

    async def transaction(self, unit: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await self._run(self._units.transaction(unit, *args))


async def _exact_json_codecs(conn: Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=dumps_exact, decoder=loads_exact, schema="pg_catalog", format="text"
        )


async def _keep_session_state(conn: Connection) -> None:
    pass


@asynccontextmanager
async def open_trio_asyncio_database(dsn: str) -> AsyncIterator[Bridged]:
    """A pool on a trio_asyncio loop, set up as payorch's own pool is."""
    async with trio_asyncio.open_loop():
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


# The units of work measured: asyncio coroutines that take a connection, as payorch's storage has.
async def select_one(conn: Connection) -> Any:
    return await conn.fetchval("SELECT 1")


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
    unit: str  # one of UNITS
    concurrency: int
    # Python work (holding the interpreter lock) each caller does on its own side after each unit,
    # as a request's own code does around its unit of work.
    work_ms: float = 0.0

    @property
    def label(self) -> str:
        statements = {"select1": "SELECT 1", "read": "1-statement read", "transaction": "BEGIN + 2 + COMMIT"}
        work = f", {self.work_ms:g} ms work" if self.work_ms else ""
        return f"{statements[self.unit]}, concurrency {self.concurrency}{work}"


@dataclass(frozen=True)
class Window:
    """One measured window of one design on one case."""

    bridge: str
    case: Case
    units: int
    seconds: float
    cpu_s: float
    switches: int  # this process's threads' context switches, voluntary or not
    latencies_ms: list[float]

    @property
    def units_per_s(self) -> float:
        return self.units / self.seconds

    @property
    def cpu_ms_per_unit(self) -> float:
        # CPU seconds per 1000 units is the same number as CPU milliseconds per unit.
        return 1000 * self.cpu_s / self.units if self.units else float("nan")

    @property
    def switches_per_unit(self) -> float:
        return self.switches / self.units if self.units else float("nan")

    def percentile(self, percent: int) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


def _hold_the_interpreter(seconds: float) -> None:
    """Busy for `seconds` in Python code, never letting go of the interpreter lock but when the
    interpreter's switch interval makes it."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def context_switches() -> int:
    """The context switches of this process's threads so far (Linux; 0 elsewhere). A thread that
    ends takes its count with it: the designs' threads outlive their windows."""
    total = 0
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in lines if "ctxt_switches:" in line)
    return total


@dataclass
class Callers:
    """`case.concurrency` callers running `case.unit` one after another through `db`, on whichever
    loop runs them (they await nothing but `db`); counted are the units that end while `counting`."""

    db: Bridged
    case: Case
    counting: bool = False
    stop: bool = False
    latencies_ms: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    seconds: float = 0.0
    switches: int = 0

    async def caller(self, seed: int) -> None:
        rows = random.Random(seed)  # noqa: S311 - which row a unit touches, not a secret
        while not self.stop:
            row_id = rows.randrange(ROWS)
            started = time.perf_counter()
            if self.case.unit == "select1":
                await self.db.autocommit(select_one)
            elif self.case.unit == "read":
                await self.db.autocommit(read_row, row_id)
            else:
                await self.db.transaction(lock_row_and_add_event, row_id)
            if self.counting:
                self.latencies_ms.append(1000 * (time.perf_counter() - started))
            _hold_the_interpreter(self.case.work_ms / 1000)

    @contextmanager
    def measured(self) -> Iterator[None]:
        """Counts the units that end inside the block, and the block's CPU and wall time."""
        self.counting = True
        switches_before = context_switches()
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        yield
        self.counting = False
        self.cpu_s, self.seconds = time.process_time() - cpu_before, time.perf_counter() - wall_before
        self.switches = context_switches() - switches_before
        self.stop = True

    def window(self, bridge: str) -> Window:
        units = len(self.latencies_ms)
        return Window(bridge, self.case, units, self.seconds, self.cpu_s, self.switches, self.latencies_ms)


async def measure(db: Bridged, bridge: str, case: Case, warmup_s: float, measured_s: float) -> Window:
    """A window of `Callers` run as Trio tasks."""
    callers = Callers(db, case)
    async with trio.open_nursery() as nursery:
        for seed in range(case.concurrency):
            nursery.start_soon(callers.caller, seed)
        await trio.sleep(warmup_s)
        with callers.measured():
            await trio.sleep(measured_s)
        nursery.cancel_scope.deadline = trio.current_time() + STRAGGLER_DEADLINE_S
    return callers.window(bridge)


async def measure_on_asyncio(
    db: Bridged, bridge: str, case: Case, warmup_s: float, measured_s: float
) -> Window:
    """A window of `Callers` run as asyncio tasks."""
    callers = Callers(db, case)
    async with asyncio.timeout(warmup_s + measured_s + STRAGGLER_DEADLINE_S), asyncio.TaskGroup() as tasks:
        for seed in range(case.concurrency):
            tasks.create_task(callers.caller(seed))
        await asyncio.sleep(warmup_s)
        with callers.measured():
            await asyncio.sleep(measured_s)
    return callers.window(bridge)


# A design measures one window by itself, in the thread it is called in: (dsn, name, case, warm-up,
# window) -> Window.
Design = Callable[[str, str, Case, float, float], Window]


def trio_window(
    open_db: Callable[[str], AbstractAsyncContextManager[Bridged]],
    dsn: str,
    name: str,
    case: Case,
    warmup_s: float,
    measured_s: float,
) -> Window:
    """A window in a Trio run of its own, through `open_db(dsn)`."""

    async def in_trio() -> Window:
        async with open_db(dsn) as db:
            return await measure(db, name, case, warmup_s, measured_s)

    return trio.run(in_trio)


async def _guest_window(loop: asyncio.AbstractEventLoop, dsn: str, *window: Any) -> Window:
    pool = await create_pool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE)
    try:
        trio_done: asyncio.Future[outcome.Outcome[Window]] = loop.create_future()
        trio.lowlevel.start_guest_run(
            measure,
            GuestDatabase(pool, loop),
            *window,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=trio_done.set_result,
        )
        return (await trio_done).unwrap()
    finally:
        await pool.close()


async def _asyncio_window(dsn: str, *window: Any) -> Window:
    pool = await create_pool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE)
    try:
        return await measure_on_asyncio(PoolUnits(pool), *window)
    finally:
        await pool.close()


def guest_window(dsn: str, name: str, case: Case, warmup_s: float, measured_s: float) -> Window:
    """A window of Trio in guest mode on a new uvloop loop that runs asyncpg too, in this thread."""
    assert uvloop is not None
    loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(_guest_window(loop, dsn, name, case, warmup_s, measured_s))
    finally:
        loop.close()


def asyncio_window(dsn: str, name: str, case: Case, warmup_s: float, measured_s: float) -> Window:
    """A window of asyncio callers on a new uvloop loop that runs asyncpg, no Trio."""
    assert uvloop is not None
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_asyncio_window(dsn, name, case, warmup_s, measured_s))


def available_designs() -> dict[str, Design]:
    designs: dict[str, Design] = {}
    if uvloop is None:
        print(
            "uvloop is not installed: thread/uvloop, guest/uvloop and asyncio/uvloop left out",
            file=sys.stderr,
        )
    else:
        designs["thread/uvloop"] = partial(
            trio_window, partial(open_thread_database, loop_factory=uvloop.Loop)
        )
        designs["guest/uvloop"] = guest_window
        designs["asyncio/uvloop"] = asyncio_window
    designs["thread/asyncio"] = partial(
        trio_window, partial(open_thread_database, loop_factory=asyncio.SelectorEventLoop)
    )
    if trio_asyncio is None:
        print("trio_asyncio is not installed: its bridge left out", file=sys.stderr)
    else:
        designs["trio_asyncio"] = partial(trio_window, open_trio_asyncio_database)
    return designs


def _print_summary(windows: list[Window], bridges: list[str], cases: list[Case]) -> None:
    baseline = TODAY if TODAY in bridges else bridges[0]
    print()
    print(
        "median over rounds; CPU = this process's CPU seconds per 1000 units; switches = its threads' "
        f"context switches per unit; x = against {baseline}"
    )
    header = (
        f"{'design':<16}{'units/s':>10}{'x':>7}{'p50 ms':>9}{'p99 ms':>9}{'CPU s/1000':>12}{'x':>7}"
        f"{'switches':>10}"
    )
    for case in cases:
        print()
        print(case.label)
        print(header)
        medians: dict[str, tuple[float, float, float, float, float]] = {}
        for bridge in bridges:
            runs = [w for w in windows if w.bridge == bridge and w.case == case]
            medians[bridge] = (
                statistics.median(w.units_per_s for w in runs),
                statistics.median(w.percentile(50) for w in runs),
                statistics.median(w.percentile(99) for w in runs),
                statistics.median(w.cpu_ms_per_unit for w in runs),
                statistics.median(w.switches_per_unit for w in runs),
            )
        base_rate, _, _, base_cpu, _ = medians[baseline]
        for bridge in bridges:
            rate, p50, p99, cpu, switches = medians[bridge]
            print(
                f"{bridge:<16}{rate:>10.0f}{rate / base_rate:>7.2f}{p50:>9.2f}{p99:>9.2f}"
                f"{cpu:>12.3f}{cpu / base_cpu:>7.2f}{switches:>10.2f}"
            )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bridge", description="bridges between Trio and asyncpg, design against design"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each measuring every design (3)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measured window (default 2)")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured warm-up per window (0.5)")
    parser.add_argument(
        "--designs", help="comma-separated designs to measure (default: every one available here)"
    )
    parser.add_argument("--units", default=",".join(UNITS), help=f"comma-separated units ({','.join(UNITS)})")
    parser.add_argument(
        "--work-ms",
        type=float,
        default=0.0,
        help="Python work each caller does after each unit, holding the interpreter lock (default 0)",
    )
    return parser.parse_args(argv)


def _chosen(names: str | None, available: list[str], what: str) -> list[str]:
    if names is None:
        return available
    chosen = names.split(",")
    unknown = [name for name in chosen if name not in available]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (available: {', '.join(available)})")
    return chosen


async def _main(args: argparse.Namespace) -> None:
    designs = available_designs()
    names = _chosen(args.designs, list(designs), "designs")
    cases = [
        Case(unit, concurrency, args.work_ms)
        for unit in _chosen(args.units, list(UNITS), "units")
        for concurrency in CONCURRENCIES
    ]
    with tempfile.TemporaryDirectory(prefix="payorch-bench-bridge-") as work_dir:
        pgdata = Path(work_dir) / "pgdata"
        async with temporary_postgres(pgdata):
            url = await start_embedded_postgres(pgdata)
            dsn = url + ("&" if "?" in url else "?") + BENCH_DSN_OPTIONS
            print(f"PostgreSQL at {dsn}", file=sys.stderr)
            async with open_thread_database(dsn, asyncio.SelectorEventLoop) as db:
                await db.autocommit(_create_tables)
            windows: list[Window] = []
            for round_number in range(args.rounds):
                for case in cases:
                    # A rotating order: no design always measured first, or right after another.
                    shift = round_number % len(names)
                    for name in names[shift:] + names[:shift]:
                        # In a thread of its own: a design may run an event loop or a Trio run.
                        window = await trio.to_thread.run_sync(
                            designs[name], dsn, name, case, args.warmup, args.seconds
                        )
                        windows.append(window)
                        print(
                            f"round {round_number + 1}/{args.rounds} {case.label:<36} {name:<15}"
                            f"{window.units_per_s:>8.0f} units/s  p50 {window.percentile(50):6.2f} ms  "
                            f"p99 {window.percentile(99):6.2f} ms  CPU {window.cpu_ms_per_unit:.3f} s/1000  "
                            f"{window.switches_per_unit:.2f} switches",
                            file=sys.stderr,
                        )
            _print_summary(windows, names, cases)


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    trio_asyncio_version = "not installed" if trio_asyncio is None else trio_asyncio.__version__
    uvloop_version = "not installed" if uvloop is None else importlib.metadata.version("uvloop")
    print(
        f"python {sys.version.split()[0]}, asyncpg {asyncpg.__version__}, trio {trio.__version__}, "
        f"trio_asyncio {trio_asyncio_version}, uvloop {uvloop_version}; "
        f"{args.rounds} rounds of {args.seconds} s windows"
    )
    trio.run(_main, args)


if __name__ == "__main__":
    main()
