"""`python -m bench` (`make bench`): session creates and reads per second and their latency, each
against a bare baseline, next to payorch's goals.

Two servers are measured one after the other, the same way, in the same run, each with two requests:
1. payorch (`payorch.service.run` in this process, on a fresh embedded PostgreSQL): `POST
   /api/v1/sessions` with an API key, its own Idempotency-Key and a valid card session body; then
   `GET /api/v1/sessions/{id}` of one session, with the same key;
2. a bare Quart-Trio app answering the same requests with a small JSON 201 or 200 (`bench/bare.py`).

The load comes from a separate process (`bench/load.py`), so that server and load generator each get
a core of a two-core machine instead of sharing one; PostgreSQL takes what is left. Everything goes
to loopback, and every run is bounded in time and in request count. The figures go to stdout; what
the benchmark is doing goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.bare import serve_bare
from bench.load import LoadResult, LoadSpec
from bench.payorch_target import (
    SESSIONS_PATH,
    Target,
    Targets,
    bench_settings,
    read_target,
    running_payorch,
)

# Cores found busy before the run beyond which the figures are flagged: other work shares the machine.
BUSY_MACHINE_CORES = 0.2
CREATE_LABEL, BARE_CREATE_LABEL = "POST /api/v1/sessions", "bare Quart-Trio POST"
READ_LABEL, BARE_READ_LABEL = "GET /api/v1/sessions/{id}", "bare Quart-Trio GET"
# payorch's goals (issue "Speed"): throughput as a share of the bare endpoint's, and create latency.
CREATE_RATIO_GOAL, CREATE_P99_GOAL_MS, READ_RATIO_GOAL = 0.5, 50.0, 0.8


@dataclass(frozen=True)
class Cores:
    """Cores kept busy during the measured window, on average."""

    server: float  # this process: payorch or the bare app
    load: float  # the load generator process
    other: float | None  # the rest of the machine, chiefly PostgreSQL; None where /proc/stat is missing


@dataclass(frozen=True)
class Measurement:
    label: str
    result: LoadResult
    cores: Cores


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="session creates/s and latency, against a bare Quart-Trio endpoint",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured phase per target (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured warm-up per target (default 2)")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 300 or not 0 <= args.warmup <= 60 or not 1 <= args.connections <= 256:
        parser.error("need 0 < --seconds <= 300, 0 <= --warmup <= 60, 1 <= --connections <= 256")
    return args


def _progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _own_cpu_s() -> float:
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
    """CPU seconds spent in this process and on the whole machine over one measured phase."""

    own_s: float = 0.0
    machine_s: float | None = None

    async def sample(self, seconds: float) -> None:
        own, machine = _own_cpu_s(), _machine_busy_s()
        await trio.sleep(seconds)
        machine_after = _machine_busy_s()
        self.own_s = _own_cpu_s() - own
        self.machine_s = None if machine is None or machine_after is None else machine_after - machine


async def _background_cores(seconds: float = 1.0) -> float | None:
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


async def _probe(target: Target) -> None:
    """One request before the load: a target that refuses it would only measure its errors."""
    headers = {**target.headers, "Content-Type": "application/json"}
    if target.unique_header:
        headers[target.unique_header] = "bench-probe"
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.request(target.method, target.url, content=target.body, headers=headers)
    if not response.is_success:
        raise RuntimeError(f"probe request to {target.url}: {response.status_code} {response.text[:500]}")


async def measure(label: str, target: Target, args: argparse.Namespace) -> Measurement:
    """Load `target` from a separate process; its CPU and this process's are taken over the window."""
    await _probe(target)
    spec = LoadSpec(
        url=target.url,
        body=target.body,
        headers=target.headers,
        unique_header=target.unique_header,
        method=target.method,
        connections=args.connections,
        warmup_s=args.warmup,
        measured_s=args.seconds,
    )
    _progress(f"loading {label}: {args.warmup:g} s warm-up, then {args.seconds:g} s measured")
    window = _CpuWindow()

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
                nursery.start_soon(window.sample, args.seconds)
            else:
                result = LoadResult(**message)
    if result is None:
        raise RuntimeError("the load generator ended without a result")
    machine, server, load = window.machine_s, window.own_s, result.client_cpu_s
    cores = Cores(
        server=server / args.seconds,
        load=load / args.seconds,
        other=None if machine is None else max(machine - server - load, 0.0) / args.seconds,
    )
    return Measurement(label, result, cores)


@asynccontextmanager
async def running_bare(work_dir: Path) -> AsyncIterator[Targets]:
    """The bare app on loopback, port 0, until the block ends."""
    settings = bench_settings(work_dir)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        addresses: list[str] = await nursery.start(partial(serve_bare, settings, shutdown=shutdown))
        headers = {"X-API-Key": "sk_bench_unused"}
        yield Targets(
            create=Target(url=addresses[0] + SESSIONS_PATH, headers=headers),
            read=read_target(addresses[0], "00000000-0000-0000-0000-000000000000", headers),
        )
        shutdown.set()


def _problems_logged(log_path: Path) -> list[str]:
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    return [line for line in lines if json.loads(line).get("level") in ("warning", "error", "critical")]


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.3f}x"


@dataclass(frozen=True)
class Comparison:
    """One request measured on payorch and on the bare app, and payorch's goals for it."""

    payorch: Measurement
    bare: Measurement
    ratio_goal: float
    p99_goal_ms: float | None = None

    @property
    def ratio(self) -> float:
        bare = self.bare.result.requests_per_s
        return self.payorch.result.requests_per_s / bare if bare else 0.0


def _goal(met: bool, text: str) -> str:
    return f"goal {text}: {'met' if met else 'not yet'}"


def report(
    comparisons: list[Comparison], args: argparse.Namespace, background: float | None
) -> Iterator[str]:
    """The lines printed: a table per request with its ratio and goals, and where the cores went."""
    yield (
        f"payorch benchmark: {args.connections} connections, {args.seconds:g} s measured after "
        f"{args.warmup:g} s warm-up, {_cpu_count()} cores"
    )
    yield f"{'target':<28}{'requests/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'errors':>9}"
    for comparison in comparisons:
        for m in (comparison.payorch, comparison.bare):
            r = m.result
            errors = sum(r.errors.values())
            yield f"{m.label:<28}{r.requests_per_s:>12.1f}{r.p50_ms:>9.1f}{r.p99_ms:>9.1f}{errors:>9}"
        goals = [_goal(comparison.ratio >= comparison.ratio_goal, f">= {comparison.ratio_goal:g}x")]
        if comparison.p99_goal_ms is not None:
            p99 = comparison.payorch.result.p99_ms
            goals.append(_goal(p99 <= comparison.p99_goal_ms, f"p99 <= {comparison.p99_goal_ms:g} ms"))
        yield f"{'payorch / bare':<28}{_ratio(comparison.ratio):>12}   {'; '.join(goals)}"
    measurements = [m for comparison in comparisons for m in (comparison.payorch, comparison.bare)]
    yield ""
    yield f"{'cores busy (measured phase)':<28}{'server':>12}{'load gen':>9}{'other':>9}"
    for m in measurements:
        other = "n/a" if m.cores.other is None else f"{m.cores.other:.2f}"
        yield f"{m.label:<28}{m.cores.server:>12.2f}{m.cores.load:>9.2f}{other:>9}"
    for m in measurements:
        if m.result.errors:
            shown = ", ".join(f"{kind}: {count}" for kind, count in sorted(m.result.errors.items()))
            yield f"errors of {m.label}: {shown}"
        if m.result.capped:
            yield f"{m.label}: stopped at the request cap before the measured phase ended"
    if background is not None and background > BUSY_MACHINE_CORES:
        yield f"before the run, other work kept {background:.2f} cores busy: these figures are not clean"
    yield ""
    yield (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}"
    )


async def main(args: argparse.Namespace) -> None:
    background = await _background_cores()
    with tempfile.TemporaryDirectory(prefix="payorch-bench-") as temporary:
        work_dir = Path(temporary)
        _progress("starting payorch on a fresh embedded PostgreSQL")
        try:
            async with running_payorch(work_dir) as targets:
                create = await measure(CREATE_LABEL, targets.create, args)
                read = await measure(READ_LABEL, targets.read, args)
                _progress("stopping payorch")
        finally:
            # payorch's own log goes to the (temporary) work directory: show what went wrong.
            problems = _problems_logged(work_dir / "payorch.log")
            for line in problems[:5]:
                _progress(f"payorch logged: {line}")
        _progress("starting the bare Quart-Trio app")
        async with running_bare(work_dir) as targets:
            bare_create = await measure(BARE_CREATE_LABEL, targets.create, args)
            bare_read = await measure(BARE_READ_LABEL, targets.read, args)
    comparisons = [
        Comparison(create, bare_create, CREATE_RATIO_GOAL, CREATE_P99_GOAL_MS),
        Comparison(read, bare_read, READ_RATIO_GOAL),
    ]
    for line in report(comparisons, args, background):
        print(line)
    if problems:
        print(f"payorch logged {len(problems)} warnings or errors (the first on stderr above)")


if __name__ == "__main__":
    trio.run(main, _parse_args(None))
