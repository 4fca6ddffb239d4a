"""Running the load generator against a target, and what the machine did meanwhile: the cores the
server (this process, or the processes of a server run apart: `bench/processes.py`), the load
generator and everything else kept busy, and this process's memory; where asked, how the server
process's CPU split between its threads (Trio's, the database's, the others), the context switches
its threads made, and the units of work it handed to the database's thread (`ThreadSplit`).

The load comes from a separate process (`bench/load.py`), so that server and load generator each get
a core of a two-core machine instead of sharing one; PostgreSQL takes what is left.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import LoadResult, LoadSpec
from bench.payorch_target import Target
from payorch.storage.loop_thread import THREAD_NAME

# CPU seconds some processes have spent so far (user and system): read at both ends of a window.
CpuClock = Callable[[], float]
# A server's count of units of work handed to the database's thread so far (read from /metrics).
UnitsCounter = Callable[[], Awaitable[int]]
UNITS_METRIC = "payorch_database_units_total"
# The units of work a /metrics scrape hands over itself (its outbox backlog query), counted in the
# figure it reads: the scrape that closes a window adds this many to the window's.
SCRAPE_UNITS = 1
# Linux names a thread by the first 15 bytes of its name.
DATABASE_THREAD_COMM = THREAD_NAME.encode()[:15].decode()
SWITCH_FIELDS = ("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")


@dataclass(frozen=True)
class Cores:
    """Cores kept busy during the measured window, on average."""

    server: float  # payorch or the bare app: this process, or the processes of one run apart
    load: float  # the load generator process
    other: float | None  # the rest of the machine, chiefly PostgreSQL; None where /proc/stat is missing
    database: float | None = None  # PostgreSQL's processes, where told apart (then not in `other`)


@dataclass(frozen=True)
class ThreadTimes:
    """What one process's threads have spent so far: CPU seconds (user and system) of Trio's
    thread (the main one, which serves) and of the database's thread, and the voluntary and
    involuntary context switches of each and of all its live threads together (`by_thread`, each
    live thread's own)."""

    trio_s: float
    database_s: float
    trio_switches: int
    database_switches: int
    switches: int
    by_thread: Mapping[str, int] = field(default_factory=dict)

    def __sub__(self, earlier: ThreadTimes) -> ThreadTimes:
        """What was spent between `earlier` and this. The switches in all are those of the threads
        live now (a thread started since counts whole, one that ended since counts nothing): a sum
        over the live threads of each would go below zero when a busy thread ends meanwhile."""
        return ThreadTimes(
            trio_s=self.trio_s - earlier.trio_s,
            database_s=self.database_s - earlier.database_s,
            trio_switches=self.trio_switches - earlier.trio_switches,
            database_switches=self.database_switches - earlier.database_switches,
            switches=sum(made - earlier.by_thread.get(tid, 0) for tid, made in self.by_thread.items()),
        )


@dataclass(frozen=True)
class ThreadSplit:
    """Over one measured window, per request served: the server process's CPU milliseconds on Trio's
    thread, on the database's thread and on its other threads (the process's whole CPU less those
    two, so threads that ended count there), its context switches, and the units of work handed to
    the database's thread (None where the server does not count them: the bare app)."""

    trio_ms: float
    database_ms: float
    other_ms: float
    trio_switches: float
    database_switches: float
    switches: float
    crossings: float | None


def thread_times(pid: int) -> ThreadTimes:
    """What `pid`'s threads have spent so far, from /proc/<pid>/task/<tid>/stat (utime and stime) and
    .../status (voluntary_ctxt_switches, nonvoluntary_ctxt_switches), Linux only. A thread that ends
    meanwhile is skipped."""
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    trio_s = database_s = 0.0
    trio_switches = database_switches = switches = 0
    by_thread: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
            comm = (task / "comm").read_text().strip()
        except OSError:  # ended since listed
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is the first
        cpu_s = (int(fields[11]) + int(fields[12])) / ticks_per_s  # utime, stime
        made = sum(int(line.split()[1]) for line in status.splitlines() if line.startswith(SWITCH_FIELDS))
        switches += made
        by_thread[task.name] = made
        if task.name == str(pid):
            trio_s, trio_switches = cpu_s, made
        elif comm == DATABASE_THREAD_COMM:
            database_s, database_switches = cpu_s, made
    return ThreadTimes(trio_s, database_s, trio_switches, database_switches, switches, by_thread)


async def scraped_units(base_url: str) -> int:
    """payorch's count of units of work handed to its database's thread, from its /metrics."""
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.get(base_url + "/metrics")
    response.raise_for_status()
    for line in response.text.splitlines():
        if line.startswith(UNITS_METRIC + " "):
            return int(float(line.split()[1]))
    raise RuntimeError(f"{base_url}/metrics has no {UNITS_METRIC}")


@dataclass(frozen=True)
class Measurement:
    label: str
    result: LoadResult
    cores: Cores
    threads: ThreadSplit | None = None  # where asked: `measure(..., threads_of=...)`


@dataclass(frozen=True)
class Shape:
    """How hard and how long a target is loaded."""

    connections: int
    warmup_s: float
    measured_s: float
    rate_per_s: float = 0.0  # 0: as fast as the connections go
    max_requests: int = 1_000_000


def progress(message: str) -> None:
    """What the benchmark is doing, on stderr: the figures alone go to stdout."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rss_bytes() -> int:
    """This process's resident memory now (VmRSS; the peak so far where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def own_cpu_s() -> float:
    """CPU seconds this process has spent so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine_busy_s() -> float | None:
    """CPU seconds all cores have spent busy since boot (Linux), or None."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


@dataclass
class _CpuWindow:
    """CPU seconds spent by the server (`server_clock`), by PostgreSQL (`database_clock`, when the
    benchmark can tell its processes apart) and on the whole machine over one measured window."""

    server_clock: CpuClock
    database_clock: CpuClock | None = None
    threads_of: int | None = None  # the server's process, whose threads are told apart
    units: UnitsCounter | None = None
    server_s: float = 0.0
    database_s: float | None = None
    machine_s: float | None = None
    threads: ThreadTimes | None = None
    units_handed: int | None = None

    async def sample(self, seconds: float, ended: trio.Event) -> None:
        """Sample from now for `seconds`, or until `ended` is set (a run that ends early). The units
        are scraped outside the CPU readings, so that the scrapes' own CPU is not the window's."""
        units = None if self.units is None else await self.units()
        server, machine = self.server_clock(), _machine_busy_s()
        database = None if self.database_clock is None else self.database_clock()
        threads = None if self.threads_of is None else thread_times(self.threads_of)
        with trio.move_on_after(seconds):
            await ended.wait()
        machine_after = _machine_busy_s()
        self.server_s = self.server_clock() - server
        if self.threads_of is not None and threads is not None:
            self.threads = thread_times(self.threads_of) - threads
        if self.database_clock is not None and database is not None:
            self.database_s = self.database_clock() - database
        self.machine_s = None if machine is None or machine_after is None else machine_after - machine
        if self.units is not None and units is not None:
            self.units_handed = await self.units() - units - SCRAPE_UNITS

    def split(self, served: int) -> ThreadSplit | None:
        """The window's thread split per request, `served` requests in it."""
        if self.threads is None or served <= 0:
            return None
        threads = self.threads
        return ThreadSplit(
            trio_ms=threads.trio_s / served * 1000,
            database_ms=threads.database_s / served * 1000,
            other_ms=max(self.server_s - threads.trio_s - threads.database_s, 0.0) / served * 1000,
            trio_switches=threads.trio_switches / served,
            database_switches=threads.database_switches / served,
            switches=threads.switches / served,
            crossings=None if self.units_handed is None else self.units_handed / served,
        )


async def background_cores(seconds: float = 1.0) -> float | None:
    """Cores the machine keeps busy with other work, averaged over `seconds` before the run."""
    before = _machine_busy_s()
    await trio.sleep(seconds)
    after = _machine_busy_s()
    return None if before is None or after is None else (after - before) / seconds


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[str]:
    buffer = b""
    while chunk := await stream.receive_some():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode()


async def probe(target: Target) -> None:
    """One request before the load: a target that refuses it would only measure its errors."""
    headers = {**target.headers, **(target.header_sets[0] if target.header_sets else {})}
    headers["Content-Type"] = "application/json"
    if target.unique_header:
        headers[target.unique_header] = "bench-probe"
    body = target.body.replace(target.unique_in_body, "bench-probe") if target.unique_in_body else target.body
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.request(target.method, target.url, content=body, headers=headers)
    if not response.is_success:
        raise RuntimeError(f"probe request to {target.url}: {response.status_code} {response.text[:500]}")


def load_spec(target: Target, shape: Shape) -> LoadSpec:
    return LoadSpec(
        url=target.url,
        body=target.body,
        headers=target.headers,
        unique_header=target.unique_header,
        method=target.method,
        connections=shape.connections,
        warmup_s=shape.warmup_s,
        measured_s=shape.measured_s,
        max_requests=shape.max_requests,
        header_sets=target.header_sets,
        rate_per_s=shape.rate_per_s,
        unique_in_body=target.unique_in_body,
        local_addresses=target.local_addresses,
    )


def encoded(spec: LoadSpec) -> bytes:
    """`spec` as the load generator reads it on its stdin."""
    return json.dumps(asdict(spec)).encode()


async def run_load_process(
    spec: LoadSpec | bytes, on_measuring: Callable[[], None] = lambda: None
) -> LoadResult:
    """Run `spec` (or its `encoded` form) in a load generator process of its own; `on_measuring`
    is called when its measured window opens."""
    result: LoadResult | None = None
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                [sys.executable, "-m", "bench.load"],
                stdin=spec if isinstance(spec, bytes) else encoded(spec),
                stdout=subprocess.PIPE,
            )
        )
        assert process.stdout is not None
        async for line in _lines(process.stdout):
            message: dict[str, Any] = json.loads(line)
            if message.pop("phase") == "measuring":
                on_measuring()
            else:
                result = LoadResult(**message)
    if result is None:
        raise RuntimeError("the load generator ended without a result")
    return result


async def measure(
    label: str,
    target: Target,
    shape: Shape,
    *,
    server_cpu: CpuClock = own_cpu_s,
    database_cpu: CpuClock | None = None,
    threads_of: int | None = None,
    units: UnitsCounter | None = None,
) -> Measurement:
    """Load `target` from a separate process; its CPU and the server's (this process's, unless
    `server_cpu` reads another's) are taken over the window, and PostgreSQL's with `database_cpu`.
    With `threads_of` (the server's process, whose CPU `server_cpu` reads), the split between its
    threads too, and with `units` the units of work it handed to its database's thread."""
    await probe(target)
    rate = f" at {shape.rate_per_s:.1f} requests/s" if shape.rate_per_s else ""
    progress(f"loading {label}{rate}: {shape.warmup_s:g} s warm-up, then {shape.measured_s:g} s measured")
    window, ended = _CpuWindow(server_cpu, database_cpu, threads_of, units), trio.Event()
    async with trio.open_nursery() as nursery:
        spec = load_spec(target, shape)
        result = await run_load_process(
            spec, lambda: nursery.start_soon(window.sample, shape.measured_s, ended)
        )
        ended.set()
    measured_s = result.measured_s
    machine, server, load = window.machine_s, window.server_s, result.client_cpu_s
    database = window.database_s
    cores = Cores(
        server=server / measured_s,
        load=load / measured_s,
        other=None if machine is None else max(machine - server - load - (database or 0.0), 0.0) / measured_s,
        database=None if database is None else database / measured_s,
    )
    return Measurement(label, result, cores, window.split(result.successes))


async def measure_beside(
    label: str, target: Target, shape: Shape, other: Target, other_shape: Shape, *, probed: bool = True
) -> tuple[Measurement, LoadResult]:
    """`target` measured while `other` gets the load of `other_shape` from a load process of its own
    over the same warm-up and measured window; returns both figures. `probed=False` for an `other`
    that payorch is meant to refuse."""
    beside, (other_result,) = await measure_beside_all(
        label, target, shape, [(other, other_shape)], probed=probed
    )
    return beside, other_result


async def measure_beside_all(
    label: str,
    target: Target,
    shape: Shape,
    others: Sequence[tuple[Target, Shape]],
    *,
    probed: bool = True,
) -> tuple[Measurement, list[LoadResult]]:
    """`target` measured while each of `others` gets its load from a load process of its own over
    the same warm-up and measured window; returns the figure and the others' in their order.
    `probed=False` for others that payorch is meant to refuse."""
    if probed:
        for other, _ in others:
            await probe(other)
    results: dict[int, LoadResult] = {}

    async def load_other(index: int, other: Target, other_shape: Shape) -> None:
        results[index] = await run_load_process(load_spec(other, other_shape))

    async with trio.open_nursery() as nursery:
        for index, (other, other_shape) in enumerate(others):
            nursery.start_soon(load_other, index, other, other_shape)
        beside = await measure(label, target, shape)
    return beside, [results[index] for index in range(len(others))]
