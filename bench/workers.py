"""workers: what `payorch serve --workers N` gets out of a node's cores, beside the bare Quart-Trio
app on as many of hypercorn's own workers, in the same run.

For one N, payorch runs apart: `python -m payorch serve --workers N --config <file>`, the file
holding what `bench_settings` sets (fresh secrets, state and the embedded PostgreSQL under the run's
directory, pool sizes, limits out of reach), on a loopback port picked free beforehand, with no
PAYORCH_* variable of the caller's shell. Its embedded PostgreSQL is started here first (payorch's
parent joins it), so that its processes are counted apart and it is gone after the run whatever
happens. Once /readyz answers and (with two or more) the parent has logged that every worker serves,
a merchant invited with `payorch invite` signs up and makes one application linked to the sandbox:
creates for it, then reads of one session, each with the create scenario's connections and time,
and each right after it the bare app's POST or GET (`bench/bare_server.py` on N hypercorn trio
workers, serving beside payorch for the whole run, as the in-process scenarios pair theirs:
`bench/paired.py`). Then creates for it due at the steady scenario's rates (`bench/steady.py`).

Server CPU is that of the whole process tree (parent and workers: `bench/processes.py`), PostgreSQL's
processes apart; RSS is each serving process's, after its runs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import trio

from bench.measure import Measurement, Shape, measure, progress
from bench.payorch_target import (
    API_KEY_HEADER,
    SESSIONS_PATH,
    bench_settings,
    create_target,
    read_target,
    temporary_postgres,
)
from bench.processes import (
    ProcessTree,
    alive,
    free_loopback_port,
    log_tail,
    rss_bytes_of,
    running_process,
    stop,
    wait_until_serving,
)
from bench.shop import MERCHANT_EMAIL, invited_merchant, new_session, sandbox_link
from bench.steady import SteadyRun, measure_steady
from payorch.config import Settings

WORKER_COUNTS = (1, 2)
INVITE_TIMEOUT_S = 60.0
# payorch's parent logs this once all N workers are ready (payorch/workers.py).
EVERY_WORKER_SERVES = "every worker serves"
ANY_SESSION_ID = "00000000-0000-0000-0000-000000000000"  # the bare app answers any


@dataclass(frozen=True)
class WorkersRun:
    """payorch on `workers` worker processes, and the bare app on as many, in the same run."""

    workers: int
    create: Measurement
    read: Measurement
    bare_create: Measurement
    bare_read: Measurement
    rss_per_worker: list[int]  # bytes, each payorch worker's after its runs
    bare_rss_per_worker: list[int]
    steady: list[SteadyRun]  # payorch's creates at the steady scenario's rates

    @property
    def create_ratio(self) -> float:
        return _ratio(self.create, self.bare_create)

    @property
    def read_ratio(self) -> float:
        return _ratio(self.read, self.bare_read)


def _ratio(payorch: Measurement, bare: Measurement) -> float:
    rate = bare.result.requests_per_s
    return payorch.result.requests_per_s / rate if rate else 0.0


def workers_label(count: int) -> str:
    return f"{count} worker" if count == 1 else f"{count} workers"


@dataclass(frozen=True)
class _Serving:
    """One server's processes on loopback for a workers run: where, its process tree, its port."""

    base_url: str
    tree: ProcessTree
    port: int


async def measure_workers(
    run_dir: Path, count: int, shape: Shape, steady_rates: tuple[float, ...], steady_seconds: float
) -> WorkersRun:
    """payorch on `count` workers and the bare app on as many, both serving for the whole run, each
    figure of one measured right after the same figure of the other (creates, then reads), each
    loaded with `shape`; then payorch's creates at each of `steady_rates`. Every file of the run
    under `run_dir` (payorch's log: `payorch.log`)."""
    async with (
        bare_serving(run_dir, count) as bare,
        _postgres(bench_settings(run_dir).database.data_dir) as postgres,
        _payorch_serving(run_dir, count) as payorch,
    ):
        token = await invite_token(run_dir / "config.toml", payorch_environment())
        async with invited_merchant(payorch.base_url, token) as merchant:
            application = await merchant.new_application("Bench", sandbox_link())
        measured = partial(measure, shape=shape, server_cpu=payorch.tree.cpu_s, database_cpu=postgres.cpu_s)
        measured_bare = partial(measure, shape=shape, server_cpu=bare.tree.cpu_s)
        label = workers_label(count)
        create = await measured(
            f"POST /api/v1/sessions, 1 app, {label}", create_target(payorch.base_url, [application.api_key])
        )
        bare_create = await measured_bare(
            f"bare Quart-Trio POST, {label}", create_target(bare.base_url, ["sk_bench_unused"])
        )
        session_id = await new_session(payorch.base_url, application.api_key)
        read = await measured(
            f"GET /api/v1/sessions/{{id}}, {label}",
            read_target(payorch.base_url, session_id, {API_KEY_HEADER: application.api_key}),
        )
        bare_read = await measured_bare(
            f"bare Quart-Trio GET, {label}",
            read_target(bare.base_url, ANY_SESSION_ID, {API_KEY_HEADER: "sk_bench_unused"}),
        )
        steady = await measure_steady(
            create_target(payorch.base_url, [application.api_key]),
            steady_rates,
            steady_seconds,
            shape.warmup_s,
            label=f"POST /api/v1/sessions, 1 app, {label}",
            server_cpu=payorch.tree.cpu_s,
            database_cpu=postgres.cpu_s,
        )
        rss = [rss_bytes_of(worker) for worker in payorch.tree.serving(payorch.port)]
        bare_rss = [rss_bytes_of(worker) for worker in bare.tree.serving(bare.port)]
        progress("workers: stopping payorch and the bare app")
    return WorkersRun(count, create, read, bare_create, bare_read, rss, bare_rss, steady)


@asynccontextmanager
async def _payorch_serving(run_dir: Path, count: int) -> AsyncIterator[_Serving]:
    """`payorch serve --workers count` on loopback (its PostgreSQL already up), until the block ends."""
    progress(f"workers: starting payorch serve --workers {count} on a fresh embedded PostgreSQL")
    port = free_loopback_port()
    base_url = f"http://127.0.0.1:{port}"
    settings = bench_settings(run_dir, bind=f"127.0.0.1:{port}")
    config_path, log_path = run_dir / "config.toml", run_dir / "payorch.log"
    config_path.write_text(config_toml(settings))
    command = [sys.executable, "-m", "payorch", "serve", f"--workers={count}", f"--config={config_path}"]
    ready = partial(_all_serve, log_path, count)
    async with running_process(command, log_path, payorch_environment(), apart=("postgres",)) as (
        process,
        tree,
    ):
        await wait_until_serving(f"{base_url}/readyz", process, log_path, ready)
        yield _Serving(base_url, tree, port)


@asynccontextmanager
async def bare_serving(run_dir: Path, count: int) -> AsyncIterator[_Serving]:
    """The bare app on `count` hypercorn workers on loopback, until the block ends; with 0, served by
    hypercorn's trio worker in the one process (`bench.bare_server --workers 0`)."""
    if count:
        progress(f"workers: starting the bare Quart-Trio app on {workers_label(count)} of hypercorn")
    else:
        progress("starting the bare Quart-Trio app in a process of its own")
    port = free_loopback_port()
    base_url = f"http://127.0.0.1:{port}"
    ready_dir, log_path = run_dir / "bare-ready", run_dir / "bare.log"
    ready_dir.mkdir()
    command = [sys.executable, "-m", "bench.bare_server", "--workers", str(count)]
    command += ["--bind", f"127.0.0.1:{port}", "--ready-dir", str(ready_dir)]
    async with running_process(command, log_path, payorch_environment()) as (process, tree):
        url = f"{base_url}{SESSIONS_PATH}/{ANY_SESSION_ID}"
        serving = max(count, 1)
        await wait_until_serving(url, process, log_path, lambda: len(list(ready_dir.iterdir())) >= serving)
        yield _Serving(base_url, tree, port)


def config_toml(settings: Settings) -> str:
    """The settings given to `settings` (as `bench_settings` makes them), as a config.toml: the
    rest stays at payorch's defaults, as it does in `settings`."""
    return "\n".join(_toml_lines(settings.model_dump(mode="json", exclude_unset=True))) + "\n"


def _toml_lines(table: dict[str, Any], name: str = "") -> list[str]:
    values = {key: value for key, value in table.items() if not isinstance(value, dict)}
    lines = [f"[{name}]"] if name and values else []
    # JSON's strings, numbers, booleans and arrays of them are TOML's too; TOML has no null.
    lines += [f"{key} = {json.dumps(value)}" for key, value in values.items() if value is not None]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += _toml_lines(value, f"{name}.{key}" if name else key)
    return lines


def payorch_environment() -> dict[str, str]:
    """This process's environment without PAYORCH_* variables: the config file alone applies."""
    return {key: value for key, value in os.environ.items() if not key.startswith("PAYORCH_")}


def _all_serve(log_path: Path, count: int) -> bool:
    """Whether every one of `count` workers serves: with one, payorch serves in its own process."""
    if count == 1:
        return True
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            if json.loads(line).get("msg") == EVERY_WORKER_SERVES:
                return True
        except (ValueError, AttributeError):
            continue
    return False


async def invite_token(config_path: Path, env: dict[str, str]) -> str:
    """A signup token for the benchmark's merchant, from `payorch invite` on the same configuration."""
    command = [sys.executable, "-m", "payorch", "invite", "--email", MERCHANT_EMAIL, "--json"]
    command += ["--config", str(config_path)]
    with trio.fail_after(INVITE_TIMEOUT_S):
        done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(
            f"payorch invite exited with status {done.returncode}: "
            f"{done.stderr.decode(errors='replace')[-2000:]}"
        )
    token: str = json.loads(done.stdout)["token"]
    return token


@asynccontextmanager
async def _postgres(data_dir: Path) -> AsyncIterator[ProcessTree]:
    """The embedded PostgreSQL under `data_dir` (`temporary_postgres`) for the length of the block:
    its postmaster and backends. Should a payorch killed have left its hold on it, so that pgserver
    does not stop it, it is stopped here (fast shutdown)."""
    postmaster: psutil.Process | None = None
    try:
        async with temporary_postgres(data_dir):
            postmaster = psutil.Process(_postmaster_pid(data_dir))
            yield ProcessTree(postmaster)
    finally:
        if postmaster is not None and alive(postmaster):
            with trio.CancelScope(shield=True):
                await stop(postmaster, signal.SIGINT)


def _postmaster_pid(data_dir: Path) -> int:
    pid_file = data_dir / "postmaster.pid"
    try:
        return int(pid_file.read_text().splitlines()[0])
    except (OSError, IndexError, ValueError) as error:
        raise RuntimeError(f"no running PostgreSQL under {data_dir}: {log_tail(data_dir / 'log')}") from error
