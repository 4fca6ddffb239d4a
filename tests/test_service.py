"""The service lifecycle: run() in-process on port 0, and `payorch serve` as a process under signals.

run() opens its own database (and its event loop thread), so these tests use the `settings` fixture
only (the `db`, `app` and `client` fixtures open another).
"""

from __future__ import annotations

import gc
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.service import YOUNG_COLLECTION_THRESHOLD, RunningService, run
from tests.processes import GRACEFUL_TIMEOUT_S, serving

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

# Seconds `payorch serve` is given to stop after a signal, on top of its graceful timeout.
SHUTDOWN_MARGIN_S = 5.0


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
    checks = {"database": True, "supervisors": True, "node": True}
    assert response.json() == {"status": "ok", "checks": checks}


async def test_what_the_service_made_to_start_is_out_of_the_collectors_sight(settings: Settings) -> None:
    # A full collection while serving walks what requests made, not the app and the runtime too.
    async with running(settings) as service:
        assert gc.get_freeze_count() > 0
        assert all(tracked is not service.db for tracked in gc.get_objects())


async def test_a_serving_process_collects_its_young_objects_after_ten_thousand(settings: Settings) -> None:
    # Not after 700: the objects of the requests in flight would be walked, alive, every few requests.
    async with running(settings):
        assert gc.get_threshold()[0] == YOUNG_COLLECTION_THRESHOLD == 10_000


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
