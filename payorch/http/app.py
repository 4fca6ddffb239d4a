"""The Quart-Trio application: blueprints, error shapes, request log, JSON that keeps money exact."""

from __future__ import annotations

import re
from typing import Any

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from jinja2 import BytecodeCache
from jinja2.bccache import Bucket
from quart import Response, request
from quart_trio.asgi import TrioASGIHTTPConnection

from payorch.http import console, login_gate, openapi
from payorch.http.error_responses import install_error_handlers
from payorch.http.jsonio import ExactJsonProvider
from payorch.http.requestlog import install_request_log
from payorch.http.routes import (
    accounts,
    applications,
    checkout_result,
    checkout_return,
    docs,
    health,
    metrics,
    payment_methods,
    provider_events,
    providers,
    reconciliations,
    refunds,
    routing,
    sessions,
    users,
    webhooks,
)
from payorch.http.services import PayorchApp, Services
from payorch.http.validation import LimitedRequest


def _decodable_query_string(query_string: bytes) -> bytes:
    """`query_string` with every byte that is not UTF-8 percent-encoded: Quart decodes the query as
    UTF-8 before any handler runs (a 500 it cannot turn into shape A), and werkzeug leaves the
    percent-encoded bytes as they are, so such a value reaches validation as plain text."""
    try:
        query_string.decode("utf-8")
    except UnicodeDecodeError:
        return re.sub(rb"[\x80-\xff]", lambda byte: b"%%%02X" % byte.group()[0], query_string)
    return query_string


async def _never_stored(response: Response) -> Response:
    """Every API answer may carry a secret (a new API key, a login's JWT, a webhook's signing secret)
    or a customer's data (a session): no browser, proxy or CDN keeps a copy. An answer that says how
    it may be cached (the OpenAPI document) keeps its own rule."""
    if request.path.startswith("/api/") and "Cache-Control" not in response.headers:
        response.headers["Cache-Control"] = "no-store"
    return response


class _CompiledTemplates(BytecodeCache):
    """The console's templates compiled once per process, not once per app: each app (a runtime, a
    test) has its own Jinja environment, and compiling the templates is most of a console page's
    first view. Jinja keys each entry by the template's name and a checksum of its source, so a
    changed template is compiled again."""

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        if (code := self._compiled.get(bucket.key)) is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()


_COMPILED_TEMPLATES = _CompiledTemplates()


class _HttpConnection(TrioASGIHTTPConnection):
    """quart-trio's handling of one HTTP request, answered in the task hypercorn started for it.

    quart-trio opens a nursery per request and starts two tasks in it: one that receives the request's
    body and its client's disconnect (and then cancels the nursery), one that answers it. Here the
    answer runs in the nursery's own body instead of a third task: the same cancellation either way
    (the nursery's scope covers its body), one task fewer started and ended per request."""

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        request = self._create_request_from_scope(send)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.handle_messages, nursery, request, receive)
            await self.handle_request(nursery, request, send)


class _App(PayorchApp):
    asgi_http_class = _HttpConnection
    json_provider_class = ExactJsonProvider
    jinja_options: dict[str, Any] = {"bytecode_cache": _COMPILED_TEMPLATES}
    request_class = LimitedRequest  # a route may lower its body limit below MAX_CONTENT_LENGTH

    async def asgi_app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        # HTTP/1.1 (h11) refuses such bytes in a request target; HTTP/2 passes them on.
        if scope["type"] == "http":
            scope = {**scope, "query_string": _decodable_query_string(scope["query_string"])}
            call = await login_gate.charged_call(self.services, scope, receive, send)
            if call is None:  # its refusal answered, or the client left while it was held
                return
            scope, receive = call
        await super().asgi_app(scope, receive, send)


def create_app(services: Services) -> PayorchApp:
    """A new app serving with `services`; nothing is shared between two apps."""
    app = _App("payorch")
    app.services = services
    app.config["MAX_CONTENT_LENGTH"] = services.context.settings.server.max_body_bytes
    app.config["JSON_SORT_KEYS"] = False
    openapi.PayorchQuartSchema(
        app,
        openapi_path="/api/v1/openapi.json",
        redoc_ui_path=None,
        scalar_ui_path=None,
        swagger_ui_path=None,  # /docs serves a Swagger UI of its own, without any outside asset
        info=openapi.INFO,
        tags=list(openapi.TAGS),
        security_schemes=dict(openapi.SECURITY_SCHEMES),
        openapi_provider_class=openapi.PayorchOpenAPIProvider,
    )
    # QuartSchema installs its own JSON provider, which would parse amounts as float: put ours back.
    app.json = ExactJsonProvider(app)
    install_request_log(app)
    install_error_handlers(app)
    app.after_request(_never_stored)
    for blueprint in (
        health.blueprint,
        metrics.blueprint,
        docs.blueprint,
        accounts.blueprint,
        users.blueprint,
        applications.blueprint,
        sessions.blueprint,
        providers.blueprint,
        routing.blueprint,
        provider_events.blueprint,
        payment_methods.blueprint,
        refunds.blueprint,
        webhooks.blueprint,
        reconciliations.blueprint,
        checkout_result.blueprint,
        checkout_return.blueprint,
        console.blueprint,
    ):
        app.register_blueprint(blueprint)
    # The invite's signupUrl opened in a browser: the console's signup page (the API's POST of the
    # same address is the accounts blueprint's).
    app.add_url_rule("/api/v1/merchants/signup", "signup_page", console.sign_up.signup_page, methods=["GET"])
    # The same for a user invited by a merchant's admin (the users blueprint has the POST).
    app.add_url_rule("/api/v1/users/signup", "join_page", console.join.join_page, methods=["GET"])
    return app
