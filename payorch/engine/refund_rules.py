"""Refund rules: how much may be refunded, and what a refund looks like in the API."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any, Literal, Protocol

from payorch.engine.session_states import REFUNDABLE, SessionStatus
from payorch.values.errors import RefundExceedsBalance, SessionNotRefundable
from payorch.values.money import to_major_units
from payorch.values.timefmt import iso

# The reasons a merchant may give for a refund (the interface's list): validated, stored, documented.
RefundReason = Literal["REQUESTED_BY_CUSTOMER", "DUPLICATE", "FRAUDULENT", "OTHER"]


class RefundStatus(enum.StrEnum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


def refund_amount(
    status: SessionStatus, requested_minor: int | None, total_minor: int, refunded_minor: int
) -> int:
    """The amount of a new refund: `requested_minor`, or the whole remaining balance when None.

    `SessionNotRefundable` unless the session is SUCCEEDED or PARTIALLY_REFUNDED;
    `RefundExceedsBalance` when more is asked than remains (total less refunds that are not FAILED).
    """
    if status not in REFUNDABLE:
        raise SessionNotRefundable(f"a {status.value} session cannot be refunded")
    balance = total_minor - refunded_minor
    amount = balance if requested_minor is None else requested_minor
    if amount > balance:
        raise RefundExceedsBalance("the refund exceeds the remaining refundable balance of the session")
    if amount <= 0:
        raise SessionNotRefundable("nothing remains to be refunded")
    return amount


class RefundLike(Protocol):
    @property
    def id(self) -> uuid.UUID: ...
    @property
    def session_id(self) -> uuid.UUID: ...
    @property
    def amount_minor(self) -> int: ...
    @property
    def currency(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def failure_reason(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...


def refund_record(refund: RefundLike) -> dict[str, Any]:
    """A refund inside a session read record (section 2.9)."""
    return {
        "id": str(refund.id),
        "amount": to_major_units(refund.amount_minor, refund.currency),
        "currency": refund.currency,
        "status": refund.status,
        "failureReason": refund.failure_reason,
        "reason": refund.reason,
        "createdAt": iso(refund.created_at),
        "updatedAt": iso(refund.updated_at),
    }


def refund_created_body(refund: RefundLike) -> dict[str, Any]:
    """The answer to a refund creation (section 2.9)."""
    body: dict[str, Any] = {
        "refundId": str(refund.id),
        "sessionId": str(refund.session_id),
        "status": refund.status,
        "amount": to_major_units(refund.amount_minor, refund.currency),
        "currency": refund.currency,
        "reason": refund.reason,
        "createdAt": iso(refund.created_at),
    }
    if refund.failure_reason is not None:
        body["failureReason"] = refund.failure_reason
    return body


def refund_event_data(refund: RefundLike) -> dict[str, Any]:
    """`data` of a refund.completed / refund.failed event: the refund record and its session id."""
    return {**refund_record(refund), "sessionId": str(refund.session_id)}
