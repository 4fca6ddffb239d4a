"""A login's or signup's charge to its client address, taken before Quart builds a request.

Login, signup, a password reset and an invited user's join (the API's and the console's) charge the
client address's bucket before anything else (`RequestLimits.charge_login`), and a charge its bucket
refuses is held for seconds first. Held inside a route, each refusal keeps Quart's request, its
context and its task alive for that long: under a flood hundreds of them, which every full
collection of the cyclic garbage collector walks, and every other merchant's request waits for.
Charged here, at the ASGI call, a held refusal keeps only the connection and the ASGI call's own few
objects.

An API login or signup its bucket refuses is answered here too (`ANSWERED_PATHS`): the route's
429 in shape A, byte for byte, with its `Retry-After`, `X-Request-Id` and `Cache-Control`
headers, counted in the metrics and logged as the route would be (`requestlog.answered_request`),
and no request, context or task of Quart's made for it. The console's pages answer a refusal
with an HTML page of the signed-in session's, so their outcome travels with the request in its
ASGI scope: the route (`charge_login`) raises the refusal, or goes on, without charging twice. A
request that did not come through here (another path spelling, a direct call) is charged by the
route as before. A client that closes its connection while held ends its hold, and nothing of
Quart's runs for it: the ASGI messages are watched meanwhile (the body's, up to
`WATCHED_BODY_BYTES`, kept and handed on to Quart after).
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any, Final, cast

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGIReceiveEvent, ASGISendCallable, HTTPScope
from quart import Request

from payorch.http.error_responses import shape_a_body
from payorch.http.requestlog import REQUEST_ID_HEADER, answered_request, request_id_for
from payorch.http.services import Services
from payorch.jsonexact import dumps_exact
from payorch.values.errors import RateLimited

# The routes that charge the client address's login bucket: their exact paths, POST only.
CHARGED_PATHS: Final = frozenset(
    {
        "/api/v1/auth/login",
        "/api/v1/merchants/signup",
        "/console/sign-in",
        "/console/sign-up",
        "/console/reset-password",
        "/console/join",
    }
)
# Of those, the API's: a refusal answered at the ASGI call, in JSON (shape A).
ANSWERED_PATHS: Final = frozenset({"/api/v1/auth/login", "/api/v1/merchants/signup"})
_OFFERED_ID: Final = REQUEST_ID_HEADER.lower().encode("latin-1")
# In the scope: None (charged), or the refusal's message and Retry-After (not the exception: its
# traceback would tie the frames that raised it into a cycle for the collector).
_OUTCOME: Final = "payorch.login_charge"


# While a charge is held, the body messages kept to notice a disconnect behind them: a login's
# body is at most 8 KiB; past this much the rest stays with the server until Quart reads it.
WATCHED_BODY_BYTES: Final = 16 * 1024


async def charged_call(
    services: Services, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
) -> tuple[HTTPScope, ASGIReceiveCallable] | None:
    """The ASGI call's `scope` and `receive` as they were, or for a login or signup a scope that
    carries its charge's outcome (the charge held first, as `RequestLimits.charge_login` holds it)
    and a `receive` that hands on what was read meanwhile; None when the call needs nothing more:
    the client left while held, or its refusal was answered here (`ANSWERED_PATHS`)."""
    if scope["method"] != "POST" or scope["path"] not in CHARGED_PATHS:
        return scope, receive
    client = scope.get("client")
    refused: tuple[str, int] | None = None
    read: list[ASGIReceiveEvent] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, receive, read, nursery.cancel_scope)
        try:
            await services.limits.charge_login(client[0] if client else None)
        except RateLimited as error:
            refused = (error.message, error.retry_after)
            del error
        nursery.cancel_scope.cancel()
    if read and read[-1]["type"] == "http.disconnect":
        return None
    if refused is not None and scope["path"] in ANSWERED_PATHS:
        await _answer_refusal(services, scope, send, *refused)
        return None
    charged = cast(HTTPScope, {**scope, _OUTCOME: refused})
    return charged, _replaying(read, receive)


async def _answer_refusal(
    services: Services, scope: HTTPScope, send: ASGISendCallable, message: str, retry_after: int
) -> None:
    """Send the route's 429 for a refused charge (`error_responses.shape_a`, and the headers the
    app's after-request hooks add to an API answer), and count and log it as answered."""
    started = time.perf_counter()
    offered = next((value for name, value in scope["headers"] if name == _OFFERED_ID), b"")
    request_id = request_id_for(offered.decode("latin-1"))
    status = HTTPStatus.TOO_MANY_REQUESTS.value
    body = dumps_exact(shape_a_body(status, message, retry_after=retry_after)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after).encode()),
        (b"cache-control", b"no-store"),
        (_OFFERED_ID, request_id.encode("latin-1")),
    ]
    path = scope["path"]
    client = scope.get("client")
    answered_request(
        services,
        (scope["method"], path, path),  # each answered path is its route's pattern
        status,
        time.perf_counter() - started,
        client[0] if client else None,
        request_id,
    )
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _watch(
    receive: ASGIReceiveCallable, read: list[ASGIReceiveEvent], charge: trio.CancelScope
) -> None:
    """Read the request's messages into `read` until `WATCHED_BODY_BYTES` of body, cancelling
    `charge` at a disconnect."""
    kept = 0
    while kept <= WATCHED_BODY_BYTES:
        message = await receive()
        read.append(message)
        if message["type"] == "http.disconnect":
            charge.cancel()
            return
        kept += len(cast(dict[str, Any], message).get("body", b""))


def _replaying(read: list[ASGIReceiveEvent], receive: ASGIReceiveCallable) -> ASGIReceiveCallable:
    """`receive`, after handing on the messages `read` already."""
    if not read:
        return receive
    pending = iter(read)

    async def replayed() -> ASGIReceiveEvent:
        return next(pending, None) or await receive()

    return replayed


async def charge_login(services: Services, request: Request) -> None:
    """Charge `request`'s client address for a login or signup, unless the ASGI call did
    (`charged_call`): then raise what it found (`RateLimited`), or return."""
    scope = cast(dict[str, Any], request.scope)
    if _OUTCOME not in scope:
        await services.limits.charge_login(request.remote_addr)
        return
    refused: tuple[str, int] | None = scope[_OUTCOME]
    if refused is not None:
        raise RateLimited(*refused)
