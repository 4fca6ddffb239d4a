"""The service lifecycle: run() in-process on port 0, and `payorch serve` as a process under signals.

run() opens its own trio_asyncio loop, so these tests use the `settings` fixture only (the `db`, `app`
and `client` fixtures open another loop).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.service import RunningService, run

# Seconds `payorch serve` is given to stop after a signal, on top of its graceful timeout.
SHUTDOWN_MARGIN_S = 5.0
GRACEFUL_TIMEOUT_S = 3


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[RunningService]:
    """The service started with nursery.start, shut down through its event when the block ends."""
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        service: RunningService = await nursery.start(partial(run, settings, shutdown=shutdown))
        yield service
        shutdown.set()


async def test_run_reports_the_address_it_bound(settings: Settings) -> None:
    async with running(settings) as service:
        assert len(service.addresses) == 1
        url = httpx.URL(service.addresses[0])
        assert url.host == "127.0.0.1"
        assert url.port not in (None, 0)


async def test_running_service_answers_healthz_over_http(settings: Settings) -> None:
    async with running(settings) as service, httpx.AsyncClient(base_url=service.addresses[0]) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_running_service_is_ready_when_its_database_answers(settings: Settings) -> None:
    async with running(settings) as service, httpx.AsyncClient(base_url=service.addresses[0]) as http:
        response = await http.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": True, "supervisors": True}}


async def test_setting_shutdown_makes_run_return(settings: Settings) -> None:
    shutdown = trio.Event()
    # The nursery block ends only once run() has returned.
    with trio.fail_after(settings.server.graceful_timeout_s + SHUTDOWN_MARGIN_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(run, settings, shutdown=shutdown))
            shutdown.set()


async def test_shutdown_is_not_held_up_by_an_idle_keep_alive_connection(settings: Settings) -> None:
    shutdown = trio.Event()
    async with httpx.AsyncClient() as http:
        # Well before the graceful timeout, which is what an unclosed idle connection would cost.
        with trio.fail_after(settings.server.graceful_timeout_s / 2):
            async with trio.open_nursery() as nursery:
                service: RunningService = await nursery.start(partial(run, settings, shutdown=shutdown))
                assert (await http.get(service.addresses[0] + "/healthz")).status_code == 200
                # The client keeps its connection open (keep-alive) while the service stops.
                shutdown.set()


# `payorch serve` as a separate process


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _serve_environment(database_dsn: str, tmp_path: Path, port: int) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(f"[server]\ngraceful_timeout_s = {GRACEFUL_TIMEOUT_S}\n")
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("PAYORCH_")}
    env.pop("XDG_RUNTIME_DIR", None)  # as in most containers; nothing may write plain text to stderr
    env.update(
        PAYORCH_CONFIG=str(config),
        PAYORCH_SERVER__BIND=f"127.0.0.1:{port}",
        PAYORCH_SERVER__STATE_DIR=str(tmp_path / "state"),
        PAYORCH_DATABASE__URL=database_dsn,
    )
    return env


async def _wait_until_healthy(base_url: str, process: trio.Process, deadline_s: float = 20.0) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        with trio.fail_after(deadline_s):
            while True:
                assert process.returncode is None, "payorch serve exited before it was healthy"
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.05)


@asynccontextmanager
async def serving(database_dsn: str, tmp_path: Path) -> AsyncIterator[tuple[trio.Process, str, Path]]:
    """`payorch serve` running and healthy: its process, base URL and the file holding its stderr."""
    port = _free_port()
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "payorch", "serve"],
            env=_serve_environment(database_dsn, tmp_path, port),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        await _wait_until_healthy(base_url, process)
        yield process, base_url, stderr_path
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_serve_exits_0_within_graceful_timeout_on_signal(
    database_dsn: str, tmp_path: Path, signum: signal.Signals
) -> None:
    async with serving(database_dsn, tmp_path) as (process, _, stderr_path):
        process.send_signal(signum)
        with trio.fail_after(GRACEFUL_TIMEOUT_S + SHUTDOWN_MARGIN_S):
            status = await process.wait()
    assert status == 0, stderr_path.read_text()


def _log_lines(stderr_path: Path) -> list[dict[str, Any]]:
    lines = stderr_path.read_text().splitlines()
    assert lines, "nothing was logged"
    parsed = []
    for line in lines:
        entry = json.loads(line)
        assert isinstance(entry, dict), line
        parsed.append(entry)
    return parsed


async def test_serve_logs_each_request_as_one_json_line_on_stderr(database_dsn: str, tmp_path: Path) -> None:
    async with serving(database_dsn, tmp_path) as (process, base_url, stderr_path):
        async with httpx.AsyncClient(base_url=base_url) as http:
            assert (await http.get("/healthz", headers={"X-Request-Id": "probe-42"})).status_code == 200
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(GRACEFUL_TIMEOUT_S + SHUTDOWN_MARGIN_S):
            await process.wait()
    requests = [line for line in _log_lines(stderr_path) if line.get("requestId") == "probe-42"]
    assert len(requests) == 1
    assert requests[0]["method"] == "GET"
    assert requests[0]["path"] == "/healthz"
    assert requests[0]["status"] == 200
