"""Refunds of a paid checkout session, in full or in part: the API's `POST .../refunds` and the
console's refund form."""

from __future__ import annotations

from typing import Any

from payorch.engine.idempotency import Answer, request_fingerprint
from payorch.engine.payments.refunds import CreateRefund, RefundDraft, refund_scope
from payorch.http.auth import Principal, parse_id
from payorch.http.models import RefundCreateRequest
from payorch.http.operations.sessions import may_read, money_of
from payorch.http.requestlog import note_application
from payorch.http.services import Services
from payorch.storage import sessions as sessions_store
from payorch.values.errors import NotFound


async def create_refund(
    services: Services, principal: Principal, session_id: str, key: str, body: Any, data: RefundCreateRequest
) -> Answer:
    """Refund the session as `data` asks, under the Idempotency-Key `key`; `body` is what the
    request's fingerprint is taken of (the API's JSON body, or what the same request would send).
    Another merchant's session is `NotFound`; the refund rules' and the key's errors as the engine
    raises them. The answer replays the first one when `key` was used before with the same body."""
    session = await services.context.db.autocommit(
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
    return await services.actors.ask(session.application_id, CreateRefund(key, fingerprint, draft))
