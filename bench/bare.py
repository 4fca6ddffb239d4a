"""The baseline: a bare Quart-Trio app with one POST endpoint, served the way payorch is served.

It answers `POST /api/v1/sessions` (the path payorch's benchmark uses, so both targets get identical
requests) by parsing the JSON body and returning a small JSON 201, and `GET /api/v1/sessions/{id}`
with a small JSON 200: the cost of hypercorn's trio worker and Quart-Trio alone, with no
authentication, validation, database or actor behind it.
"""

from __future__ import annotations

from typing import Any

import trio
from hypercorn.trio import serve as hypercorn_serve
from quart import request
from quart_trio import QuartTrio

from payorch.config import Settings
from payorch.service import _finish_responses_uncancelled, _hypercorn_config


def create_bare_app() -> QuartTrio:
    app = QuartTrio(__name__)

    @app.post("/api/v1/sessions")
    async def create_session() -> tuple[dict[str, Any], int]:
        body = await request.get_json()
        return {"orderReference": body["orderReference"], "status": "PENDING"}, 201

    @app.get("/api/v1/sessions/<session_id>")
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
