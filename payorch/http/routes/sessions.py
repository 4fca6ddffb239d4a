"""Checkout sessions: created by a merchant's server (API key) or dashboard (JWT), then read, listed
per application, and searched across the merchant's applications (JWT)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from quart import Blueprint, Response, jsonify, request
from quart_schema import document_headers, document_response, security_scheme, tag_blueprint
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import CLOSED
from payorch.engine.idempotency import MAX_KEY_LENGTH, Answer
from payorch.engine.payments.records import ListedSession, SessionCreated, SessionRecord
from payorch.http import openapi as api
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import PageQuery, Query, SessionCreateRequest
from payorch.http.openapi import IDEMPOTENCY_HEADER
from payorch.http.operations import session_search, sessions
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.pagination import MAX_LIMIT, Page, envelope

blueprint = Blueprint("sessions", __name__, url_prefix="/api/v1")
tag_blueprint(blueprint, ["Sessions"])

REPLAYED_HEADER = "Idempotent-Replayed"


def idempotency_key() -> str:
    """The request's `Idempotency-Key`: required, 1 to `MAX_KEY_LENGTH` characters."""
    key = request.headers.get(IDEMPOTENCY_HEADER, "")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(
            f"header {IDEMPOTENCY_HEADER} is required: 1 to {MAX_KEY_LENGTH} characters",
            [FieldProblem(IDEMPOTENCY_HEADER, f"required, 1 to {MAX_KEY_LENGTH} characters")],
        )
    return key


def answer_response(answer: Answer) -> tuple[Response, int]:
    response = jsonify(answer.body)
    if answer.replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return response, answer.status


@blueprint.post("/sessions")
@security_scheme(api.JWT_OR_API_KEY)
@document_headers(api.IdempotencyKeyHeader)
@document_response(SessionCreated, 201)
@api.errors(400, 401, 403, 404, 413, 429, 500, 502, 503)
@api.coded_errors("IDEMPOTENCY_KEY_MISMATCH", "IDEMPOTENCY_KEY_IN_PROGRESS", "NO_PROVIDER_AVAILABLE")
@authenticated(Accept.JWT_OR_API_KEY)
@validate_request(SessionCreateRequest)
async def create_session(data: SessionCreateRequest, principal: Principal) -> tuple[Response, int]:
    """Create a checkout session, routed by the application's routing document. Needs `Idempotency-Key`."""
    key = idempotency_key()
    answer = await sessions.create_session(services(), principal, key, await request.get_json(), data)
    return answer_response(answer)


class SessionSearchQuery(Query):
    """The filters of the merchant's list (docs/api.md "Payments across applications"), its
    keyset page (`after`, `limit`): text, read by `operations.session_search`."""

    orderReference: str | None = None
    customerEmail: str | None = None
    amount: str | None = None
    amountMin: str | None = None
    amountMax: str | None = None
    currency: str | None = None
    provider: str | None = None
    status: str | None = None
    createdFrom: str | None = None
    createdTo: str | None = None
    applicationId: str | None = None
    after: str | None = None
    limit: str | None = None


@with_config(CLOSED)
class SessionSearchPage(TypedDict):
    """A keyset page of the merchant's sessions, newest first: `nextCursor`, given as `after`,
    reads the page after this one (null: this is the last)."""

    items: list[ListedSession]
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)]
    hasNextPage: bool
    nextCursor: str | None


@blueprint.get("/sessions")
@security_scheme(api.JWT)
@document_response(SessionSearchPage, 200)
@api.errors(400, 401, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(SessionSearchQuery)
async def search_sessions(
    query_args: SessionSearchQuery, principal: Principal
) -> SessionSearchPage | Response:
    """The merchant's sessions across its applications, newest first, filtered, in keyset pages.
    With `Accept: text/csv`: every session the filters hold (`after` and `limit` aside) as CSV, one
    header line then one line per session, streamed."""
    values = query_args.model_dump(exclude_none=True)
    search = session_search.parse_search(principal.merchant_id, values)
    if request.accept_mimetypes.best_match(["application/json", "text/csv"]) == "text/csv":
        rows = session_search.export_csv(services(), principal, search)
        return Response(rows, content_type="text/csv; charset=utf-8")
    limit = session_search.parse_limit(query_args.limit)
    after = session_search.key_of(query_args.after)
    found = await session_search.search_page(services(), principal, search, after, limit)
    return {
        "items": found.items,
        "limit": limit,
        "hasNextPage": found.next_cursor is not None,
        "nextCursor": found.next_cursor,
    }


@blueprint.get("/sessions/<session_id>")
@security_scheme(api.JWT_OR_API_KEY)
@document_response(SessionRecord, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT_OR_API_KEY)
async def get_session(session_id: str, principal: Principal) -> SessionRecord:
    """A session's read record. Another merchant's session is 404, as if it did not exist."""
    _, record = await sessions.read_session(services(), principal, session_id)
    return record


@blueprint.get("/applications/<application_id>/sessions")
@security_scheme(api.JWT_OR_API_KEY)
@document_response(Page[SessionRecord], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT_OR_API_KEY)
@validate_querystring(PageQuery)
async def list_sessions(
    application_id: str, query_args: PageQuery, principal: Principal
) -> Page[SessionRecord]:
    """The application's checkout sessions, each with its refunds where it can have any."""
    page = query_args.page_request
    items, total = await sessions.list_sessions(services(), principal, application_id, page)
    return envelope(items, page, total)
