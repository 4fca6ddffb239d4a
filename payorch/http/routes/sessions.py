"""Checkout sessions: created by a merchant's server (API key) or dashboard (JWT), then read."""

from __future__ import annotations

import uuid
from typing import Any

from quart import Blueprint, Response, jsonify, request
from quart_schema import document_headers, document_response, security_scheme, tag_blueprint

from payorch.engine.idempotency import MAX_KEY_LENGTH, Answer, request_fingerprint
from payorch.engine.payments.checkout import CreateSession
from payorch.engine.payments.reads import session_page, session_with_record
from payorch.engine.payments.records import SessionCreated, SessionRecord
from payorch.http import openapi as api
from payorch.http.auth import Accept, Principal, application_for, authenticated, parse_id
from payorch.http.models import PageQuery, SessionCreateRequest
from payorch.http.openapi import IDEMPOTENCY_HEADER
from payorch.http.requestlog import note_application
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.storage.sessions import ALL_SESSIONS, CheckoutSession, SessionDraft, SessionFilter
from payorch.values.errors import FieldProblem, InvalidInput, NotFound, NotPermitted
from payorch.values.money import Money, TooManyDecimals, UnknownCurrency
from payorch.values.pagination import Page, PageRequest, envelope

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


def money_of(amount: Any, currency: str, field: str) -> Money:
    try:
        return Money.from_major(amount, currency)
    except UnknownCurrency as error:
        raise InvalidInput("unknown currency", [FieldProblem("currency", str(error))]) from None
    except TooManyDecimals as error:
        raise InvalidInput("amount has too many decimals", [FieldProblem(field, str(error))]) from None


async def _target_application(principal: Principal, requested: uuid.UUID | None) -> uuid.UUID:
    """The application a session is created for. An API key's own application needs no read: the
    key's authentication just found it, enabled, with the merchant it belongs to."""
    if principal.is_api_key:
        assert principal.application_id is not None
        if requested is not None and requested != principal.application_id:
            raise NotPermitted("this API key belongs to another application")
        return principal.application_id
    if requested is None:
        raise InvalidInput(
            "applicationId is required with an access token",
            [FieldProblem("applicationId", "required when authenticating with a JWT")],
        )
    application = await application_for(principal, str(requested))
    if not application.is_enabled:
        raise NotPermitted("the application is disabled")
    return application.id


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
    application_id = await _target_application(principal, data.applicationId)
    draft = session_draft(data, application_id)
    body = await request.get_json()
    fingerprint = request_fingerprint({**body, "applicationId": str(application_id)}, "POST /api/v1/sessions")
    answer = await services().actors.ask(application_id, CreateSession(key, fingerprint, draft))
    return answer_response(answer)


def session_draft(data: SessionCreateRequest, application_id: uuid.UUID) -> SessionDraft:
    """The session `data` asks for, for the application: `InvalidInput` (400) for a payment method
    no provider of the catalogue offers, or an amount its currency cannot hold."""
    catalogue_methods = services().context.providers.all_payment_methods()
    if data.paymentMethod not in catalogue_methods:
        raise InvalidInput(
            "unknown payment method",
            [
                FieldProblem(
                    "paymentMethod", f"must be one of {', '.join(sorted(catalogue_methods)) or 'none'}"
                )
            ],
        )
    total = money_of(data.amount.total, data.currency, "amount.total")
    shipping = money_of(data.amount.shipping, data.currency, "amount.shipping")
    tax = money_of(data.amount.tax, data.currency, "amount.tax")
    for index, item in enumerate(data.orderItems or []):
        money_of(item.unitPrice, data.currency, f"orderItems.{index}.unitPrice")
    dumped = data.model_dump(mode="python", exclude_none=True)
    return SessionDraft(
        application_id=application_id,
        order_reference=data.orderReference,
        amount=total,
        shipping_minor=shipping.minor,
        tax_minor=tax.minor,
        payment_method=data.paymentMethod,
        locale=data.locale,
        customer=dumped["customer"],
        order_items=dumped.get("orderItems"),
        shipping=dumped.get("shipping"),
        additional_information=dumped.get("additionalInformation"),
        redirect_urls=dumped.get("redirectUrls"),
    )


@blueprint.get("/sessions/<session_id>")
@security_scheme(api.JWT_OR_API_KEY)
@document_response(SessionRecord, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT_OR_API_KEY)
async def get_session(session_id: str, principal: Principal) -> SessionRecord:
    """A session's read record. Another merchant's session is 404, as if it did not exist."""
    _, record = await session_of(principal, session_id)
    return record


async def session_of(principal: Principal, session_id: str) -> tuple[CheckoutSession, SessionRecord]:
    """The session and its read record, if `principal` may read it: `NotFound` for another
    merchant's session (or another application's, for an API key), as for one that does not exist."""
    found = await services().context.db.autocommit(session_with_record, parse_id(session_id, "session"))
    if found is None or not await may_read(principal, found[0].application_id):
        raise NotFound("session not found", missing="session")
    note_application(found[0].application_id)
    return found


async def may_read(principal: Principal, application_id: uuid.UUID) -> bool:
    if principal.is_api_key:
        return principal.application_id == application_id
    try:
        await application_for(principal, str(application_id))
    except (NotPermitted, NotFound):
        return False
    return True


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
    items, total = await sessions_of(principal, application_id, page)
    return envelope(items, page, total)


async def sessions_of(
    principal: Principal, application_id: str, page: PageRequest, where: SessionFilter = ALL_SESSIONS
) -> tuple[list[SessionRecord], int]:
    """A page of the application's session records that `where` holds (the API's list: all), and
    how many it holds; the application's errors of `application_for`."""
    application = await application_for(principal, application_id)
    async with services().limits.list_read(principal.merchant_id):
        return await services().context.db.snapshot(session_page, application.id, page, where)
