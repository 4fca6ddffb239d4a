"""A login's or signup's charge to its client address, taken before Quart builds a request.

Login, signup and a password reset (the API's and the console's) charge the client address's
bucket before anything else (`RequestLimits.charge_login`), and a charge its bucket refuses is held
for seconds first. Held inside a route, each refusal keeps Quart's request, its context and its task alive for
that long: under a flood hundreds of them, which every full collection of the cyclic garbage
collector walks, and every other merchant's request waits for. Charged here, at the ASGI call, a
held refusal keeps only the connection and the ASGI call's own few objects.

The outcome travels with the request in its ASGI scope: the route (`charge_login`) raises the
refusal, or goes on, without charging twice. A request that did not come through here (another
path spelling, a direct call) is charged by the route as before. A client that closes its
connection while held ends its hold, and nothing of Quart's runs for it: the ASGI messages are
watched meanwhile (the body's, up to `WATCHED_BODY_BYTES`, kept and handed on to Quart after).
"""

from __future__ import annotations

from typing import Any, Final, cast

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGIReceiveEvent, HTTPScope
from quart import Request

from payorch.http.services import Services
from payorch.values.errors import RateLimited

# The routes that charge the client address's login bucket: their exact paths, POST only.
CHARGED_PATHS: Final = frozenset(
    {
        "/api/v1/auth/login",
        "/api/v1/merchants/signup",
        "/console/sign-in",
        "/console/sign-up",
        "/console/reset-password",
    }
)
# In the scope: None (charged), or the refusal's message and Retry-After (not the exception: its
# traceback would tie the frames that raised it into a cycle for the collector).
_OUTCOME: Final = "payorch.login_charge"


# While a charge is held, the body messages kept to notice a disconnect behind them: a login's
# body is at most 8 KiB; past this much the rest stays with the server until Quart reads it.
WATCHED_BODY_BYTES: Final = 16 * 1024


async def charged_call(
    services: Services, scope: HTTPScope, receive: ASGIReceiveCallable
) -> tuple[HTTPScope, ASGIReceiveCallable] | None:
    """The ASGI call's `scope` and `receive` as they were, or for a login or signup a scope that
    carries its charge's outcome (the charge held first, as `RequestLimits.charge_login` holds it)
    and a `receive` that hands on what was read meanwhile; None when the client left while held."""
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
    charged = cast(HTTPScope, {**scope, _OUTCOME: refused})
    return charged, _replaying(read, receive)


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
