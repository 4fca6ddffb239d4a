"""Checkout sessions: created by a merchant's server (API key) or dashboard (JWT), then read."""

from __future__ import annotations

from quart import Blueprint, Response, jsonify, request
from quart_schema import document_headers, document_response, security_scheme, tag_blueprint

from payorch.engine.idempotency import MAX_KEY_LENGTH, Answer
from payorch.engine.payments.records import SessionCreated, SessionRecord
from payorch.http import openapi as api
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import PageQuery, SessionCreateRequest
from payorch.http.openapi import IDEMPOTENCY_HEADER
from payorch.http.operations import sessions
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.pagination import Page, envelope

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
