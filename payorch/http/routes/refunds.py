"""Refunds of a paid checkout session, in full or in part."""

from __future__ import annotations

from quart import Blueprint, Response, request
from quart_schema import document_headers, document_response, security_scheme, tag_blueprint

from payorch.engine.payments.refund_rules import RefundCreated
from payorch.http import openapi as api
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import RefundCreateRequest
from payorch.http.operations import refunds
from payorch.http.routes.sessions import answer_response, idempotency_key
from payorch.http.services import services
from payorch.http.validation import validate_optional_request

blueprint = Blueprint("refunds", __name__, url_prefix="/api/v1")
tag_blueprint(blueprint, ["Refunds"])


@blueprint.post("/sessions/<session_id>/refunds")
@security_scheme(api.JWT_OR_API_KEY)
@document_headers(api.IdempotencyKeyHeader)
@document_response(RefundCreated, 201)
@document_response(RefundCreated, 202)
@api.errors(400, 401, 403, 404, 413, 429, 500, 503)
@api.coded_errors(
    "IDEMPOTENCY_KEY_MISMATCH",
    "IDEMPOTENCY_KEY_IN_PROGRESS",
    "SESSION_NOT_REFUNDABLE",
    "REFUND_EXCEEDS_BALANCE",
)
@authenticated(Accept.JWT_OR_API_KEY)
@validate_optional_request(RefundCreateRequest)
async def create_refund(
    session_id: str, data: RefundCreateRequest, principal: Principal
) -> tuple[Response, int]:
    """Refund `amount` (default: all that remains). 201 when the provider acknowledged the refund,
    202 when it will be submitted again later; the outcome arrives by webhook either way."""
    key = idempotency_key()
    answer = await refunds.create_refund(
        services(), principal, session_id, key, await request.get_json(), data
    )
    return answer_response(answer)
