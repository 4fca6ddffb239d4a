"""The baseline: a bare Quart-Trio app with one POST endpoint, served the way payorch is served.

It answers `POST /api/v1/sessions` (the path payorch's benchmark uses, so both targets get identical
requests) by parsing the JSON body and returning a small JSON 201, and `GET /api/v1/sessions/{id}`
with a small JSON 200: the cost of hypercorn's trio worker and Quart-Trio alone, with no
authentication, validation, database or actor behind it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.trio import serve as hypercorn_serve
from quart import request
from quart_trio import QuartTrio

from bench.payorch_target import SESSIONS_PATH, bench_settings
from payorch.config import Settings
from payorch.service import _finish_responses_uncancelled, _hypercorn_config


def create_bare_app() -> QuartTrio:
    app = QuartTrio(__name__)

    @app.post(SESSIONS_PATH)
    async def create_session() -> tuple[dict[str, Any], int]:
        body = await request.get_json()
        return {"orderReference": body["orderReference"], "status": "PENDING"}, 201

    @app.get(SESSIONS_PATH + "/<session_id>")
    async def read_session(session_id: str) -> dict[str, Any]:
        return {"id": session_id, "status": "PENDING"}

    return app


async def serve_bare(
    settings: Settings,
    *,
    shutdown: trio.Event,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the bare app on `server.bind`, with payorch's own hypercorn configuration and ASGI
    wrapper, until `shutdown` is set. Reports the bound addresses."""
    await hypercorn_serve(
        _finish_responses_uncancelled(create_bare_app()),
        _hypercorn_config(settings),
        shutdown_trigger=shutdown.wait,
        task_status=task_status,
    )


@asynccontextmanager
async def running_bare(work_dir: Path) -> AsyncIterator[str]:
    """The bare app on loopback, port 0, until the block ends: its base URL."""
    settings = bench_settings(work_dir)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        addresses: list[str] = await nursery.start(partial(serve_bare, settings, shutdown=shutdown))
        yield addresses[0]
        shutdown.set()
