"""Refund rules: how much may be refunded, and what a refund looks like in the API (each body's
shape, a closed `TypedDict` that the OpenAPI document shows too, beside the function that builds it)."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, get_args

from pydantic import with_config
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import (
    CLOSED,
    CurrencyCode,
    Money,
    Timestamp,
    Uuid,
    listed,
    one_of,
)
from payorch.engine.payments.states import REFUNDABLE
from payorch.storage.refunds import Refund
from payorch.values.errors import RefundExceedsBalance, SessionNotRefundable
from payorch.values.money import to_major_units
from payorch.values.statuses import RefundStatus, SessionStatus
from payorch.values.timefmt import iso

# The reasons a merchant may give for a refund (the interface's list): validated, stored, documented.
RefundReason = Literal["REQUESTED_BY_CUSTOMER", "DUPLICATE", "FRAUDULENT", "OTHER"]
REFUND_REASONS: tuple[RefundReason, ...] = get_args(RefundReason)


RefundStatusField = Annotated[RefundStatus, listed(RefundStatus)]


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


@with_config(CLOSED)
class RefundRecord(TypedDict):
    id: Uuid
    amount: Money
    currency: CurrencyCode
    status: RefundStatusField
    failureReason: str | None
    reason: RefundReason | None
    createdAt: Timestamp
    updatedAt: Timestamp


def refund_record(refund: Refund) -> RefundRecord:
    """A refund inside a session read record (section 2.9)."""
    return {
        "id": str(refund.id),
        "amount": to_major_units(refund.amount_minor, refund.currency),
        "currency": refund.currency,
        "status": refund.status,
        "failureReason": refund.failure_reason,
        "reason": _reason(refund),
        "createdAt": iso(refund.created_at),
        "updatedAt": iso(refund.updated_at),
    }


@with_config(CLOSED)
class RefundCreated(TypedDict):
    """The refund (PENDING until the provider confirms it; the outcome arrives by webhook)."""

    refundId: Uuid
    sessionId: Uuid
    status: RefundStatusField
    amount: Money
    currency: CurrencyCode
    reason: RefundReason | None
    failureReason: NotRequired[str]
    createdAt: Timestamp


def refund_created_body(refund: Refund) -> RefundCreated:
    """The answer to a refund creation (section 2.9), which the Idempotency-Key keeps to replay."""
    body: RefundCreated = {
        "refundId": str(refund.id),
        "sessionId": str(refund.session_id),
        "status": refund.status,
        "amount": to_major_units(refund.amount_minor, refund.currency),
        "currency": refund.currency,
        "reason": _reason(refund),
        "createdAt": iso(refund.created_at),
    }
    if refund.failure_reason is not None:
        body["failureReason"] = refund.failure_reason
    return body


@with_config(CLOSED)
class RefundEventData(RefundRecord):
    """`data` of a refund.completed / refund.failed event: the refund record and its session id."""

    sessionId: Uuid


def refund_event_data(refund: Refund) -> RefundEventData:
    return {**refund_record(refund), "sessionId": str(refund.session_id)}


def _reason(refund: Refund) -> RefundReason | None:
    return None if refund.reason is None else one_of(refund.reason, REFUND_REASONS)
