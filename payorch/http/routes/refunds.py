"""Refunds of a paid checkout session, in full or in part."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, request
from quart_schema import document_headers, document_response, security_scheme, tag_blueprint

from payorch.engine.idempotency import Answer, request_fingerprint
from payorch.engine.payments.refund_rules import RefundCreated
from payorch.engine.payments.refunds import CreateRefund, RefundDraft, refund_scope
from payorch.http import openapi as api
from payorch.http.auth import Accept, Principal, authenticated, parse_id
from payorch.http.models import RefundCreateRequest
from payorch.http.requestlog import note_application
from payorch.http.routes.sessions import answer_response, idempotency_key, may_read, money_of
from payorch.http.services import services
from payorch.http.validation import validate_optional_request
from payorch.storage import sessions as sessions_store
from payorch.values.errors import NotFound

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
    answer = await create_refund_of(principal, session_id, key, await request.get_json(), data)
    return answer_response(answer)


async def create_refund_of(
    principal: Principal, session_id: str, key: str, body: Any, data: RefundCreateRequest
) -> Answer:
    """Refund the session as `data` asks, under the Idempotency-Key `key`; `body` is what the
    request's fingerprint is taken of (the API's JSON body, or what the same request would send).
    Another merchant's session is `NotFound`; the refund rules' and the key's errors as the engine
    raises them. The answer replays the first one when `key` was used before with the same body."""
    session = await services().context.db.autocommit(
        sessions_store.get_session, parse_id(session_id, "session")
    )
    if session is None or not await may_read(principal, session.application_id):
        raise NotFound("session not found", missing="session")
    note_application(session.application_id)
    amount = money_of(data.amount, session.currency, "amount") if data.amount is not None else None
    for index, item in enumerate(data.lineItems or []):  # informational, but money all the same
        money_of(item.unitPrice, session.currency, f"lineItems.{index}.unitPrice")
    draft = RefundDraft(
        session_id=session.id,
        amount=amount,
        reason=data.reason,
        line_items=data.model_dump(mode="python", exclude_none=True).get("lineItems"),
    )
    fingerprint = request_fingerprint(body, refund_scope(session.id))
    return await services().actors.ask(session.application_id, CreateRefund(key, fingerprint, draft))
