"""A slow Stripe on loopback: the part of Stripe's API payorch's Stripe adapter uses to link an
account and open a checkout, answering each checkout create only after `checkout_delay_s`.

It lets the benchmark give one application a provider that takes a second to answer, the way a
struggling provider would, through payorch's real Stripe adapter and SDK (`providers.stripe.api_base`
points here). Answers have Stripe's shapes (`balance`, `webhook_endpoint`, `list`, `checkout.session`,
Stripe's error body); any secret key starting `sk_` is accepted, and nothing is kept beyond the
webhook endpoints an account registered (a handful: one per link).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from quart import request
from quart_trio import QuartTrio

JsonAnswer = tuple[str, int, dict[str, str]]


@dataclass
class SlowStripe:
    """Where the slow Stripe listens (set once bound), how slow it is, and what it was asked."""

    checkout_delay_s: float
    url: str = ""
    checkouts_created: int = 0
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)  # by id


def _answer(status: int, body: dict[str, Any]) -> JsonAnswer:
    headers = {"Content-Type": "application/json", "Request-Id": "req_" + secrets.token_hex(7)}
    return json.dumps(body), status, headers


def _error(status: int, message: str) -> JsonAnswer:
    return _answer(status, {"error": {"type": "invalid_request_error", "message": message}})


def _stripe_app(stripe: SlowStripe) -> QuartTrio:
    app = QuartTrio("slow_stripe")

    @app.route("/<path:path>", methods=["GET", "POST", "DELETE"])
    async def api(path: str) -> JsonAnswer:
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not key.startswith("sk_"):
            return _error(401, "Invalid API Key provided")
        body = await request.get_data(as_text=True)
        form = dict(parse_qsl(body if isinstance(body, str) else body.decode(), keep_blank_values=True))
        route = (request.method, "/" + path)
        if route == ("GET", "/v1/balance"):
            amounts = [{"amount": 0, "currency": "pln"}]
            return _answer(200, {"object": "balance", "available": amounts, "pending": amounts})
        if route == ("POST", "/v1/webhook_endpoints"):
            endpoint: dict[str, Any] = {
                "id": "we_" + secrets.token_hex(12),
                "object": "webhook_endpoint",
                "url": form.get("url"),
                "enabled_events": [v for k, v in form.items() if k.startswith("enabled_events")],
                "status": "enabled",
                "livemode": False,
            }
            stripe.endpoints[endpoint["id"]] = endpoint
            return _answer(200, {**endpoint, "secret": "whsec_" + secrets.token_hex(24)})
        if route == ("GET", "/v1/webhook_endpoints"):
            listed = list(stripe.endpoints.values())
            return _answer(
                200, {"object": "list", "url": "/v1/webhook_endpoints", "has_more": False, "data": listed}
            )
        if request.method == "DELETE" and path.startswith("v1/webhook_endpoints/"):
            endpoint_id = path.rpartition("/")[2]
            stripe.endpoints.pop(endpoint_id, None)
            return _answer(200, {"id": endpoint_id, "object": "webhook_endpoint", "deleted": True})
        if route == ("POST", "/v1/checkout/sessions"):
            await trio.sleep(stripe.checkout_delay_s)  # the provider taking its time
            stripe.checkouts_created += 1
            checkout_id = "cs_test_" + secrets.token_hex(16)
            return _answer(
                200,
                {
                    "id": checkout_id,
                    "object": "checkout.session",
                    "mode": "payment",
                    "status": "open",
                    "payment_status": "unpaid",
                    "client_reference_id": form.get("client_reference_id"),
                    "url": f"https://checkout.stripe.com/c/pay/{checkout_id}",
                    "livemode": False,
                },
            )
        return _error(404, f"Unrecognized request URL ({request.method}: /{path}).")

    return app


@asynccontextmanager
async def open_slow_stripe(checkout_delay_s: float) -> AsyncIterator[SlowStripe]:
    """The slow Stripe on http://127.0.0.1:<free port> until the block ends."""
    stripe = SlowStripe(checkout_delay_s)
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = logging.getLogger("bench.slow_stripe")
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn_serve, _stripe_app(stripe), config))
        stripe.url = binds[0]
        yield stripe
        nursery.cancel_scope.cancel()
