"""Request ids and the one JSON log line per request.

Every response carries `X-Request-Id`. A caller may send its own (letters, digits, `-`, `_`, `.`, up
to 128 characters) to correlate logs; anything else is replaced by a fresh id.

The line (method, path, status, duration, client address, request id, application) is logged with
`payorch.logs.log_line`: a record of exactly those fields, handed to the configured handlers.
"""

from __future__ import annotations

import logging
import os
import re
import time

from quart import Quart, Request, Response, g, request

from payorch import logcontext
from payorch.http.services import Services, services
from payorch.logs import log_line

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


def request_id_for(offered: str) -> str:
    """The id a request is answered and logged with: the caller's (`offered`) when acceptable,
    otherwise a fresh one."""
    return offered if is_acceptable_request_id(offered) else f"req_{os.urandom(16).hex()}"


async def _start() -> None:
    g.request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER, ""))
    logcontext.request_id.set(g.request_id)
    logcontext.application_id.set(None)
    g.started = time.perf_counter()


async def _finish(response: Response) -> Response:
    request_id = g.get("request_id")
    response.headers[REQUEST_ID_HEADER] = request_id or ""
    started = g.get("started")
    seconds = time.perf_counter() - started if started else 0.0
    # The request itself, once, rather than through its proxy at every attribute.
    answered: Request = request._get_current_object()  # type: ignore[attr-defined]
    rule = answered.url_rule.rule if answered.url_rule is not None else None
    answered_request(
        services(),
        (answered.method, rule, answered.path),
        response.status_code,
        seconds if started else None,
        answered.remote_addr,
        request_id,
        g.get("application_id"),
    )
    return response


def answered_request(
    services: Services,
    route: tuple[str, str | None, str],
    status: int,
    seconds: float | None,
    remote_addr: str | None,
    request_id: str | None,
    application_id: str | None = None,
) -> None:
    """Count a request answered (`route`: its method, route pattern and path) in the metrics and
    write its log line; `seconds` None when its start is unknown."""
    method, rule, path = route
    services.context.metrics.http_request(method, rule, status, seconds or 0.0)
    log_line(
        log,
        logging.INFO,
        "request",
        {
            "method": method,
            "path": path,
            "status": status,
            "durationMs": None if seconds is None else round(seconds * 1000, 3),
            "remoteAddr": remote_addr,
            "requestId": request_id,
            "applicationId": application_id,
        },
    )


def install_request_log(app: Quart) -> None:
    app.before_request(_start)
    app.after_request(_finish)
