"""Checkout sessions: created (the API's `POST /api/v1/sessions` and the console's test payment),
read one at a time, and listed."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from payorch.engine.idempotency import Answer, request_fingerprint
from payorch.engine.payments.checkout import SESSION_CREATE_SCOPE, CreateSession
from payorch.engine.payments.reads import session_page, session_with_record, sessions_with_records
from payorch.engine.payments.records import SessionRecord
from payorch.http.auth import Principal, application_for, parse_id
from payorch.http.models import SessionCreateRequest
from payorch.http.services import Services
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage.sessions import ALL_SESSIONS, CheckoutSession, SessionDraft, SessionFilter
from payorch.values.errors import FieldProblem, InvalidInput, NotFound, NotPermitted
from payorch.values.money import Money, TooManyDecimals, UnknownCurrency
from payorch.values.pagination import PageRequest


def money_of(amount: Any, currency: str, field: str) -> Money:
    """`amount` of `currency` as `Money`: `InvalidInput` (400) naming `field` for an amount the
    currency cannot hold, or naming `currency` for a currency payorch does not know."""
    try:
        return Money.from_major(amount, currency)
    except UnknownCurrency as error:
        raise InvalidInput("unknown currency", [FieldProblem("currency", str(error))]) from None
    except TooManyDecimals as error:
        raise InvalidInput("amount has too many decimals", [FieldProblem(field, str(error))]) from None


def session_draft(
    providers: ProviderCatalogue, data: SessionCreateRequest, application_id: uuid.UUID
) -> SessionDraft:
    """The session `data` asks for, for the application: `InvalidInput` (400) for a payment method
    no provider of the catalogue offers, or an amount its currency cannot hold."""
    catalogue_methods = providers.all_payment_methods()
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


async def session_application(principal: Principal, requested: uuid.UUID | None) -> uuid.UUID:
    """The application a session of `principal` is created for (`requested`, the body's
    `applicationId`): an API key's own, or for an access token the one it names, which must be
    enabled (`NotPermitted`, 403, otherwise; `InvalidInput`, 400, when it names none). An API key's
    own application needs no read: the key's authentication just found it, enabled, with the
    merchant it belongs to."""
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


async def create_session(
    services: Services, principal: Principal, key: str, body: Any, data: SessionCreateRequest
) -> Answer:
    """Create the session `data` (validated from the JSON `body`) asks for, under the
    Idempotency-Key `key`, routed by its application's actor: the errors of `session_application`
    and `session_draft`, the key's and routing's as the engine raises them. The answer replays the
    first one when `key` was used before with the same body."""
    application_id = await session_application(principal, data.applicationId)
    draft = session_draft(services.context.providers, data, application_id)
    fingerprint = request_fingerprint({**body, "applicationId": str(application_id)}, SESSION_CREATE_SCOPE)
    return await services.actors.ask(application_id, CreateSession(key, fingerprint, draft))


async def may_read(principal: Principal, application_id: uuid.UUID) -> bool:
    """Whether `principal` may read the application's sessions and refunds."""
    if principal.is_api_key:
        return principal.application_id == application_id
    try:
        await application_for(principal, str(application_id))
    except (NotPermitted, NotFound):
        return False
    return True


async def read_session(
    services: Services, principal: Principal, session_id: str
) -> tuple[CheckoutSession, SessionRecord]:
    """The session and its read record, if `principal` may read it: `NotFound` for another
    merchant's session (or another application's, for an API key), as for one that does not exist."""
    db, wanted = services.context.db, parse_id(session_id, "session")
    found = await db.reads_together.read(
        db, sessions_with_records, wanted, alone=partial(db.autocommit, session_with_record, wanted)
    )
    if found is None or not await may_read(principal, found[0].application_id):
        raise NotFound("session not found", missing="session")
    # Its application is noted for the log line already: the API key's own, or the one
    # `application_for` just checked.
    return found


async def list_sessions(
    services: Services,
    principal: Principal,
    application_id: str,
    page: PageRequest,
    where: SessionFilter = ALL_SESSIONS,
) -> tuple[list[SessionRecord], int]:
    """A page of the application's session records that `where` holds (the API's list: all), and
    how many it holds; the application's errors of `application_for`."""
    application = await application_for(principal, application_id)
    async with services.limits.list_read(principal.merchant_id):
        return await services.context.db.snapshot(session_page, application.id, page, where)
