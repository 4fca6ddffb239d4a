"""Running the load generator against a target, and what the machine did meanwhile: the cores the
server (this process, or the processes of a server run apart: `bench/processes.py`), the load
generator and everything else kept busy, and this process's memory.

The load comes from a separate process (`bench/load.py`), so that server and load generator each get
a core of a two-core machine instead of sharing one; PostgreSQL takes what is left.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import LoadResult, LoadSpec
from bench.payorch_target import Target

# CPU seconds some processes have spent so far (user and system): read at both ends of a window.
CpuClock = Callable[[], float]


@dataclass(frozen=True)
class Cores:
    """Cores kept busy during the measured window, on average."""

    server: float  # payorch or the bare app: this process, or the processes of one run apart
    load: float  # the load generator process
    other: float | None  # the rest of the machine, chiefly PostgreSQL; None where /proc/stat is missing
    database: float | None = None  # PostgreSQL's processes, where told apart (then not in `other`)


@dataclass(frozen=True)
class Measurement:
    label: str
    result: LoadResult
    cores: Cores


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
    server_s: float = 0.0
    database_s: float | None = None
    machine_s: float | None = None

    async def sample(self, seconds: float, ended: trio.Event) -> None:
        """Sample from now for `seconds`, or until `ended` is set (a run that ends early)."""
        server, machine = self.server_clock(), _machine_busy_s()
        database = None if self.database_clock is None else self.database_clock()
        with trio.move_on_after(seconds):
            await ended.wait()
        machine_after = _machine_busy_s()
        self.server_s = self.server_clock() - server
        if self.database_clock is not None and database is not None:
            self.database_s = self.database_clock() - database
        self.machine_s = None if machine is None or machine_after is None else machine_after - machine


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


async def run_load_process(spec: LoadSpec, on_measuring: Callable[[], None] = lambda: None) -> LoadResult:
    """Run `spec` in a load generator process of its own; `on_measuring` is called when its
    measured window opens."""
    result: LoadResult | None = None
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                [sys.executable, "-m", "bench.load"],
                stdin=json.dumps(asdict(spec)).encode(),
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
) -> Measurement:
    """Load `target` from a separate process; its CPU and the server's (this process's, unless
    `server_cpu` reads another's) are taken over the window, and PostgreSQL's with `database_cpu`."""
    await probe(target)
    rate = f" at {shape.rate_per_s:.1f} requests/s" if shape.rate_per_s else ""
    progress(f"loading {label}{rate}: {shape.warmup_s:g} s warm-up, then {shape.measured_s:g} s measured")
    window, ended = _CpuWindow(server_cpu, database_cpu), trio.Event()
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
    return Measurement(label, result, cores)


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
