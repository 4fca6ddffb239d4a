"""The API's representations of sessions and events, built from stored values."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, Protocol, get_args

from payorch.engine.session_states import WITH_REFUNDS, SessionStatus
from payorch.values.money import to_major_units
from payorch.values.timefmt import iso

# The events a merchant may subscribe to and receive (the interface's list).
EventType = Literal["session.completed", "session.expired", "refund.completed", "refund.failed"]
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)


class SessionLike(Protocol):
    """What a session record is built from (read-only)."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def order_reference(self) -> str: ...

    @property
    def amount_minor(self) -> int: ...

    @property
    def currency(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def failure_reason(self) -> str | None: ...

    @property
    def provider_name(self) -> str | None: ...

    @property
    def payment_method(self) -> str: ...

    @property
    def expires_at(self) -> datetime | None: ...

    @property
    def created_at(self) -> datetime: ...

    @property
    def updated_at(self) -> datetime: ...


def session_record(session: SessionLike, refunds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The session read record of section 2.8; `refunds` only in the states that carry them."""
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
        "refunds": (refunds or []) if SessionStatus(session.status) in WITH_REFUNDS else None,
    }


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def event_body(
    event_id: str, event_type: str, created_at: datetime, application_id: uuid.UUID, data: dict[str, Any]
) -> dict[str, Any]:
    """The body of a webhook delivery: `{id, type, createdAt, applicationId, data}`."""
    return {
        "id": event_id,
        "type": event_type,
        "createdAt": iso(created_at),
        "applicationId": str(application_id),
        "data": data,
    }
