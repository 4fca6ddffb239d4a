"""Checkout sessions: reads for a merchant's dashboard (JWT) or server (API key)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint
from quart_schema import validate_querystring

from payorch.engine.money import to_major_units
from payorch.engine.pagination import PageRequest, envelope
from payorch.engine.timefmt import iso
from payorch.http.auth import Accept, Principal, application_for, authenticated
from payorch.http.context import services
from payorch.http.models import PageQuery
from payorch.storage import sessions as store
from payorch.storage.sessions import CheckoutSession

blueprint = Blueprint("sessions", __name__, url_prefix="/api/v1")

# The states whose read record carries its refunds (section 2.8); `refunds` is null in the others.
_STATES_WITH_REFUNDS = frozenset({"SUCCEEDED", "PARTIALLY_REFUNDED", "REFUNDED", "REVERSED"})


def session_record(session: CheckoutSession) -> dict[str, Any]:
    return {
        "id": str(session.id),
        "orderReference": session.order_reference,
        "amount": to_major_units(session.amount_minor, session.currency),
        "currency": session.currency,
        "status": session.status,
        "failureReason": session.failure_reason,
        "providerName": session.provider_name,
        "paymentMethod": session.payment_method,
        "expiresAt": iso(session.expires_at),
        "createdAt": iso(session.created_at),
        "updatedAt": iso(session.updated_at),
        "refunds": [] if session.status in _STATES_WITH_REFUNDS else None,
    }


@blueprint.get("/applications/<application_id>/sessions")
@authenticated(Accept.JWT_OR_API_KEY)
@validate_querystring(PageQuery)
async def list_sessions(application_id: str, query_args: PageQuery, principal: Principal) -> dict[str, Any]:
    application = await application_for(principal, application_id)
    page = PageRequest(page=query_args.page, limit=query_args.limit)
    found, total = await services().db.read(store.list_sessions, application.id, page)
    return envelope([session_record(item) for item in found], page, total)
