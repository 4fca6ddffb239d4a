"""The baseline: a bare Quart-Trio app with one POST endpoint, served the way payorch is served.

It answers `POST /api/v1/sessions` (the path payorch's benchmark uses, so both targets get identical
requests) by parsing the JSON body and returning a small JSON 201, and `GET /api/v1/sessions/{id}`
with a small JSON 200: the cost of hypercorn's trio worker and Quart-Trio alone, with no
authentication, validation, database or actor behind it.
"""

from __future__ import annotations

from typing import Any

from quart import request
from quart_trio import QuartTrio

from bench.payorch_target import SESSIONS_PATH


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
