"""An application's routing: its routing document, read and replaced (`ETag` and `If-Match` on its
version), its versions listed and each read back, a session's route tried out without creating it,
and a candidate document replayed over the application's last sessions (docs/routing.md)."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from quart import Blueprint, request
from quart_schema import (
    document_headers,
    document_request,
    document_response,
    security_scheme,
    tag_blueprint,
)
from werkzeug.exceptions import RequestEntityTooLarge

from payorch.engine.routing.document import MAX_DOCUMENT_BYTES
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated, open_to_read_only
from payorch.http.jsonio import loads_request_json
from payorch.http.models import (
    PageQuery,
    RoutingBacktestRequest,
    RoutingDocumentUpdate,
    RoutingEvaluateRequest,
)
from payorch.http.operations import routing
from payorch.http.services import services
from payorch.http.validation import limit_request_body, validate_querystring, validate_request
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.pagination import Page, envelope

blueprint = Blueprint("routing", __name__, url_prefix="/api/v1/applications")
tag_blueprint(blueprint, ["Routing"])

# The most an evaluate body holds: a document as large as a PUT's, and the session beside it.
MAX_EVALUATE_BYTES = MAX_DOCUMENT_BYTES + 16 * 1024

R = TypeVar("R")

# One entity tag of an If-Match list (RFC 9110, 8.8.3): optionally weak, then quoted.
_ENTITY_TAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e]*)"\s*')
_VERSION_TAG = re.compile(r"[0-9]{1,10}")


def _if_match() -> frozenset[int] | None:
    """The versions the request's `If-Match` allows to be in force (0: none stored yet), or None
    without the header or with `*` (a routing document is always there: the default, version 0).
    Compared strongly (RFC 9110, 13.1.1): a weak tag matches no version, nor does a tag that names
    none. A header that is not a list of entity tags (a bare `3`) is 400."""
    values = request.headers.getlist("If-Match")
    if not values:
        return None
    header = ", ".join(values)
    if header.strip() == "*":
        return None
    versions: set[int] = set()
    for part in header.split(","):
        tag = _ENTITY_TAG.fullmatch(part)
        if tag is None:
            raise InvalidInput(
                "invalid If-Match header",
                [
                    FieldProblem(
                        "If-Match", 'must be entity tags as ETag writes them, such as "3" (quoted), or *'
                    )
                ],
            )
        weak, opaque = tag.groups()
        if not weak and _VERSION_TAG.fullmatch(opaque):
            versions.add(int(opaque))
    return frozenset(versions)


def _tagged(body: bodies.RoutingDocument) -> tuple[bodies.RoutingDocument, int, dict[str, str]]:
    """The document in force as answered, with its version as `ETag`."""
    return body, 200, {"ETag": routing.entity_tag(body["version"])}


async def _document_sent() -> Any:
    """The request's body as JSON: refused (400) past `MAX_DOCUMENT_BYTES`, before it is read."""
    limit_request_body(MAX_DOCUMENT_BYTES)
    try:
        data = await request.get_data(as_text=False)
    except RequestEntityTooLarge:
        raise InvalidInput(
            "routing document too large",
            [FieldProblem("body", f"a routing document takes at most {MAX_DOCUMENT_BYTES} bytes")],
        ) from None
    assert isinstance(data, bytes)
    return loads_request_json(data)


@blueprint.get("/<application_id>/routing")
@security_scheme(api.JWT)
@document_response(bodies.RoutingDocument, 200)
@api.errors(401, 403, 404, 429, 500)
@api.entity_tagged
@authenticated(Accept.JWT)
async def get_routing(
    application_id: str, principal: Principal
) -> tuple[bodies.RoutingDocument, int, dict[str, str]]:
    """The application's routing document in force: the default (version 0) until one is stored.

    Its version is also the answer's `ETag` (`"3"`), for a PUT's `If-Match`."""
    return _tagged(
        routing.routing_body(await routing.read_routing_document(services(), principal, application_id))
    )


@blueprint.put("/<application_id>/routing")
@security_scheme(api.JWT)
@document_request(RoutingDocumentUpdate)
@document_headers(api.IfMatchHeader)
@document_response(bodies.RoutingDocument, 200)
@api.errors(400, 401, 403, 404, 412, 429, 500)
@api.entity_tagged
@authenticated(Accept.JWT)
async def put_routing(
    application_id: str, principal: Principal
) -> tuple[bodies.RoutingDocument, int, dict[str, str]]:
    """Replace the application's routing document: stored as its next version, every earlier one kept.

    A document that is not sound is refused (400) with one `details` entry per problem, and nothing
    is stored; so is a body over 64 KiB. The answer is the document as stored, with its `version`
    and `updatedAt` (and the version as `ETag`); a document the same as the one in force stores
    nothing and answers that one, its version unchanged. With `If-Match` (the `ETag` of the version
    the change was made on, `"3"`), the document is stored only while that version is in force:
    otherwise 412, nothing stored. Sending a kept version's document back (`GET
    .../routing/versions/{version}`) restores it as a new version. An application's changes are
    rate-limited (`limits.routing_changes_per_hour`, `limits.routing_changes_burst`): beyond them,
    429 with Retry-After, nothing stored."""
    application = await application_for(principal, application_id)  # 403 and 404 before the body
    services().limits.check_routing_changes(application.id)  # known to be used up: before the body
    if_version = _if_match()
    stored = await routing.replace_routing_document(
        services(), principal, application_id, await _document_sent(), if_version=if_version
    )
    return _tagged(routing.routing_body(stored))


@blueprint.get("/<application_id>/routing/versions")
@security_scheme(api.JWT)
@document_response(Page[bodies.RoutingVersion], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_routing_versions(
    application_id: str, query_args: PageQuery, principal: Principal
) -> Page[bodies.RoutingVersion]:
    """The versions of the application's routing document, newest first: each version's number,
    when it was stored and the id of the user who stored it (null before payorch kept it)."""
    page = query_args.page_request
    found, total = await routing.list_routing_versions(services(), principal, application_id, page)
    return envelope([routing.routing_version_body(version) for version in found], page, total)


@blueprint.get("/<application_id>/routing/versions/<version>")
@security_scheme(api.JWT)
@document_response(bodies.RoutingDocument, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def get_routing_version(
    application_id: str, version: str, principal: Principal
) -> bodies.RoutingDocument:
    """One kept version of the application's routing document, as `GET .../routing` answered it
    while it was in force: a PUT of it restores it (as a new version). A version the application
    does not keep (0, the default, is never stored) is 404."""
    return routing.routing_body(
        await routing.read_routing_version(services(), principal, application_id, version)
    )


def _evaluation_charged(view: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """An evaluate route: the merchant charged (`charge_routing_evaluation`), then the application's
    403 and 404, then its body refused (400, as a PUT's) past `MAX_EVALUATE_BYTES`, all before the
    body is read. The charge comes first: it is the merchant's own bucket (a 429 tells nothing of
    the application), and an evaluation refused over it then costs no read of the application, and
    when this process knows the bucket empty, no database round trip at all besides the JWT's. Place
    it between `authenticated` and `validate_request`."""

    @functools.wraps(view)
    async def charged(*args: Any, application_id: str, principal: Principal, **kwargs: Any) -> R:
        await routing.charge_routing_evaluation(services(), principal)
        await application_for(principal, application_id)  # read once: the operation's check is free
        limit_request_body(MAX_EVALUATE_BYTES)
        try:
            return await view(*args, application_id=application_id, principal=principal, **kwargs)
        except RequestEntityTooLarge:
            raise InvalidInput(
                "request body too large",
                [FieldProblem("body", f"an evaluate body takes at most {MAX_EVALUATE_BYTES} bytes")],
            ) from None

    return charged


@blueprint.post("/<application_id>/routing/evaluate")
@security_scheme(api.JWT)
@document_response(bodies.RoutingEvaluation, 200)
@api.errors(400, 401, 403, 404, 413, 429, 500, 503)
@authenticated(Accept.JWT)
@_evaluation_charged
@validate_request(RoutingEvaluateRequest)
@open_to_read_only  # it creates nothing
async def evaluate_routing(
    application_id: str, data: RoutingEvaluateRequest, principal: Principal
) -> bodies.RoutingEvaluation:
    """How a session would be routed now: a session create body, and optionally a routing document
    to try instead of the stored one in `routing`.

    The answer is the decision: the matching rule, the route's type, the version of the document,
    the provider a create would try first and every provider's place in the ranking with its score
    and reason. It creates nothing and calls no provider. A split or an exploration draws from the
    session's id, new for each call, as it is for each session. A merchant's evaluations are
    rate-limited (`limits.routing_evaluations_per_second`, `..._burst`: 429 beyond them) and a
    body over 80 KiB is 400, both before the body is read."""
    return routing.evaluation_body(
        await routing.evaluate_routing(services(), principal, application_id, data)
    )


@blueprint.post("/<application_id>/routing/backtest")
@security_scheme(api.JWT)
@document_response(bodies.RoutingBacktest, 200)
@api.errors(400, 401, 403, 404, 413, 429, 500, 503)
@authenticated(Accept.JWT)
@validate_request(RoutingBacktestRequest)
@open_to_read_only  # it stores nothing
async def backtest_routing(
    application_id: str, data: RoutingBacktestRequest, principal: Principal
) -> bodies.RoutingBacktest:
    """Replay a candidate routing document over the application's last sessions.

    The body holds the document in `routing`, how many days back to go in `days` (1 to 30, the
    default) and at most how many sessions, the newest, in `limit` (up to 100,000, the default).
    Each session is routed by the candidate as a create would route it now (the providers linked
    now, the success rates learned now, its split and exploration drawn from its id), and by the
    document in force the same way; the candidate is compared with that replay. The answer counts,
    per provider, the sessions that went there and those each document sends there first, with the
    approval each provider showed on its own sessions; per rule, the sessions it matches; the
    doubly robust estimates of both documents' approval beside the one observed, with the change's
    95% interval; and what the candidate's recovery policy would have changed where the history's
    attempts tell. It is an estimate made in hindsight:
    docs/routing.md says what a backtest cannot know. A document with problems is 400, each named
    under `routing.`. It stores nothing and calls no provider. It is decided in a worker process,
    not in the server's: backtests take their turn there in the order they came. A merchant has
    one backtest running or waiting at a time (another is 429), the process a few (one more is
    503), both with Retry-After."""
    return routing.backtest_body(await routing.backtest_routing(services(), principal, application_id, data))
