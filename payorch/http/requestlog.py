"""Request ids and the one JSON log line per request.

Every response carries `X-Request-Id`. A caller may send its own (letters, digits, `-`, `_`, `.`, up
to 128 characters) to correlate logs; anything else is replaced by a fresh id.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from quart import Quart, Response, g, request

from payorch import logcontext
from payorch.http.services import services

log = logging.getLogger("payorch.access")

REQUEST_ID_HEADER = "X-Request-Id"
_ACCEPTABLE_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def is_acceptable_request_id(offered: str) -> bool:
    """Whether a caller's request id is safe to echo in a header and to log as it is."""
    # fullmatch, not match with `$`: `$` also matches before a trailing newline.
    return _ACCEPTABLE_ID.fullmatch(offered) is not None


def note_application(application_id: object) -> None:
    """Record the application a request concerns, for its log line."""
    g.application_id = str(application_id)
    logcontext.application_id.set(g.application_id)


async def _start() -> None:
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    g.request_id = offered if is_acceptable_request_id(offered) else f"req_{uuid.uuid4().hex}"
    logcontext.request_id.set(g.request_id)
    logcontext.application_id.set(None)
    g.started = time.perf_counter()


async def _finish(response: Response) -> Response:
    response.headers[REQUEST_ID_HEADER] = g.get("request_id", "")
    started = g.get("started")
    seconds = time.perf_counter() - started if started else 0.0
    rule = request.url_rule.rule if request.url_rule is not None else None
    services().context.metrics.http_request(request.method, rule, response.status_code, seconds)
    log.info(
        "request",
        extra={
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "durationMs": round(seconds * 1000, 3) if started else None,
            "remoteAddr": request.remote_addr,
            "requestId": g.get("request_id"),
            "applicationId": g.get("application_id"),
        },
    )
    return response


def install_request_log(app: Quart) -> None:
    app.before_request(_start)
    app.after_request(_finish)
