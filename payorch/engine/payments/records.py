"""The API's representations of sessions and events, built from stored values: each body's shape
(a closed `TypedDict`, also the OpenAPI document's) beside the function that builds it.

A body is the interface's shape of a session, not payorch's: its keys and their JSON types are the
contract (API.md), written from the stored session (`storage.sessions.CheckoutSession`), which is
the one definition of what a session holds."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Required, cast

from pydantic import Field, WithJsonSchema, with_config
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import (
    CLOSED,
    CurrencyCode,
    EventType,
    Money,
    TestEventType,
    Timestamp,
    Uuid,
    listed,
)
from payorch.engine.payments.refund_rules import RefundEventData, RefundRecord
from payorch.engine.payments.states import PAID, WITH_REFUNDS
from payorch.storage.attempts import EndedAttempt
from payorch.storage.sessions import CheckoutSession
from payorch.values.money import to_major_units
from payorch.values.statuses import AttemptStatus, FailureReason, RoutingReason, SessionStatus
from payorch.values.timefmt import iso

SessionStatusField = Annotated[SessionStatus, listed(SessionStatus)]


@with_config(CLOSED)
class Routing(TypedDict):
    """Where the session was routed and why (docs/routing.md). A session created before payorch
    kept the explanation reads `rule: null, reason: "dynamic", version: 0`."""

    selectedProvider: str
    score: Annotated[Decimal, WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1})]
    rule: Annotated[str | None, Field(description="the matching rule's name; null: the default route")]
    reason: Annotated[
        RoutingReason,
        listed(RoutingReason),
        Field(
            description="`rule`, `split`, `dynamic` or `exploration`: how the route put the provider "
            "first; `cascade`: a provider after the first in the order created the checkout"
        ),
    ]
    version: Annotated[int, Field(ge=0, description="of the routing document; 0: the default one")]


def session_routing(session: CheckoutSession) -> Routing | None:
    """The session's `routing` as stored; None for a session no provider created a checkout for."""
    if session.provider_name is None or session.routing_score is None:
        return None
    return {
        "selectedProvider": session.provider_name,
        "score": session.routing_score,
        "rule": session.routing_rule,
        "reason": session.routing_reason or RoutingReason.DYNAMIC,
        "version": session.routing_version or 0,
    }


@with_config(CLOSED)
class SessionEventData(TypedDict):
    """`data` of a session's webhook event: the session read record (`SessionRecord`) without its
    `attempts` and `customer`. `refunds` is a list in SUCCEEDED, PARTIALLY_REFUNDED, REFUNDED and
    REVERSED, null otherwise."""

    id: Uuid
    orderReference: str
    amount: Money
    currency: CurrencyCode
    status: SessionStatusField
    failureReason: str | None
    providerName: str | None
    paymentMethod: str
    expiresAt: Timestamp | None
    createdAt: Timestamp
    updatedAt: Timestamp
    disputeLostAt: Annotated[
        Timestamp | None,
        Field(description="when the provider last reported a lost dispute (chargeback); null: never"),
    ]
    routing: Routing | None
    refunds: list[RefundRecord] | None


def session_event_data(
    session: CheckoutSession, refunds: list[RefundRecord] | None = None
) -> SessionEventData:
    """The session as its webhook events carry it; `refunds` only in the states that carry them."""
    status = session.status
    return {
        "id": str(session.id),
        "orderReference": session.order_reference,
        "amount": to_major_units(session.amount_minor, session.currency),
        "currency": session.currency,
        "status": status,
        "failureReason": session.failure_reason,
        "providerName": session.provider_name,
        "paymentMethod": session.payment_method,
        "expiresAt": iso(session.expires_at),
        "createdAt": iso(session.created_at),
        "updatedAt": iso(session.updated_at),
        "disputeLostAt": iso(session.dispute_lost_at),
        "routing": session_routing(session),
        "refunds": (refunds or []) if status in WITH_REFUNDS else None,
    }


@with_config(CLOSED)
class AttemptRecord(TypedDict):
    """A payment attempt of the session: a checkout at one provider. The last is the session's
    current one: OPEN while the session is PENDING, else as the session ended."""

    number: Annotated[int, Field(ge=1, description="the session's first attempt is 1")]
    provider: str
    status: Annotated[AttemptStatus, listed(AttemptStatus)]
    failureReason: Annotated[
        FailureReason | None,
        WithJsonSchema({"anyOf": [listed(FailureReason).json_schema, {"type": "null"}]}),
        Field(description="why the provider declined, or the session failed"),
    ]
    providerCode: Annotated[str | None, Field(description="the provider's own decline code")]
    reason: Annotated[
        RoutingReason,
        listed(RoutingReason),
        Field(description="why the attempt went to its provider, as the session's `routing.reason`"),
    ]
    createdAt: Timestamp
    endedAt: Annotated[
        Timestamp | None,
        Field(
            description="null while OPEN; for the current attempt once ended, when the session "
            "expired, or else when it last changed"
        ),
    ]


@with_config(CLOSED)
class AddressRecord(TypedDict, total=False):
    """An address as given at create: the members that were given."""

    line1: Required[str]
    line2: str
    city: Required[str]
    state: str
    postalCode: Required[str]
    country: Required[str]


@with_config(CLOSED)
class CustomerRecord(TypedDict, total=False):
    """The customer as given at create: `email` always, the other members when they were given."""

    email: Required[str]
    firstName: str
    lastName: str
    phone: str
    billingAddress: AddressRecord
    shippingAddress: AddressRecord


@with_config(CLOSED)
class SessionRecord(SessionEventData):
    """A checkout session. `refunds` is a list in SUCCEEDED, PARTIALLY_REFUNDED, REFUNDED and
    REVERSED, null otherwise. `attempts` lists its payment attempts, oldest first; `providerName`
    and `routing` are its current (last) attempt's. `customer` is the customer given at create."""

    attempts: list[AttemptRecord]
    customer: CustomerRecord


def current_attempt_status(session: CheckoutSession) -> AttemptStatus:
    """The status of the session's current attempt (its row's), from the session's: OPEN while it is
    PENDING, SUCCEEDED once paid, EXPIRED or DECLINED once it FAILED."""
    if session.status is SessionStatus.PENDING:
        return AttemptStatus.OPEN
    if session.status in PAID:
        return AttemptStatus.SUCCEEDED
    if session.failure_reason is FailureReason.EXPIRED:
        return AttemptStatus.EXPIRED
    return AttemptStatus.DECLINED


def _current_attempt(session: CheckoutSession, ended: Sequence[EndedAttempt]) -> AttemptRecord | None:
    if session.provider_name is None:
        return None  # no provider created a checkout for it
    checkout = (session.provider_name, session.provider_reference)
    if any((attempt.provider_name, attempt.provider_reference) == checkout for attempt in ended):
        return None  # ended among them: paid too after a late success paid the session, refunded
    status = current_attempt_status(session)
    if status is AttemptStatus.SUCCEEDED and any(a.status is AttemptStatus.SUCCEEDED for a in ended):
        status = AttemptStatus.CLOSED  # a late success of an ended attempt paid the session
    ended_at = None
    if status is AttemptStatus.EXPIRED:
        ended_at = session.expires_at
    elif status is not AttemptStatus.OPEN:
        ended_at = session.updated_at
    return {
        "number": len(ended) + 1,
        "provider": session.provider_name,
        "status": status,
        "failureReason": session.failure_reason,
        "providerCode": None,
        "reason": session.routing_reason or RoutingReason.DYNAMIC,
        "createdAt": iso(ended[-1].ended_at if ended else session.created_at),
        "endedAt": iso(ended_at),
    }


def attempt_records(session: CheckoutSession, ended: Sequence[EndedAttempt]) -> list[AttemptRecord]:
    """The session's attempts, oldest first: its `ended` ones, then its current one (its row's)."""
    records: list[AttemptRecord] = [
        {
            "number": attempt.number,
            "provider": attempt.provider_name,
            "status": attempt.status,
            "failureReason": attempt.failure_reason,
            "providerCode": attempt.provider_code,
            "reason": attempt.routing_reason or RoutingReason.DYNAMIC,
            "createdAt": iso(attempt.created_at),
            "endedAt": iso(attempt.ended_at),
        }
        for attempt in ended
    ]
    current = _current_attempt(session, ended)
    return [*records, current] if current is not None else records


def session_record(
    session: CheckoutSession, refunds: list[RefundRecord], ended: Sequence[EndedAttempt]
) -> SessionRecord:
    """The session read record of section 2.8: its refunds (shown only in the states that carry
    them), its attempts, the `ended` ones then its current one, and its customer as given."""
    return {
        **session_event_data(session, refunds),
        "attempts": attempt_records(session, ended),
        "customer": cast(CustomerRecord, session.customer or {}),
    }


@with_config(CLOSED)
class ListedSession(SessionRecord):
    """A session of the merchant's list across its applications: its read record, and its
    application."""

    applicationId: Uuid


@with_config(CLOSED)
class SessionCreated(TypedDict):
    """The checkout session (a replay of the same request answers the same body, with header
    `Idempotent-Replayed: true`)."""

    sessionId: Uuid
    checkoutUrl: Annotated[str, Field(description="where the customer pays")]
    status: SessionStatusField
    routing: Routing
    expiresAt: Timestamp
    createdAt: Timestamp


@with_config(CLOSED)
class WebhookTestData(TypedDict):
    """`data` of a `webhook.test` event: the configuration it was sent for."""

    webhookId: Uuid


class Event(TypedDict):
    """A webhook event as payorch sends it (Standard Webhooks' `id` is `id`)."""

    id: str
    type: EventType | TestEventType
    createdAt: Timestamp
    applicationId: Uuid
    data: SessionEventData | RefundEventData | WebhookTestData


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def event_body(
    event_id: str,
    event_type: EventType | TestEventType,
    created_at: datetime,
    application_id: uuid.UUID,
    data: SessionEventData | RefundEventData | WebhookTestData,
) -> Event:
    """The body of a webhook delivery, as the outbox stores it."""
    return {
        "id": event_id,
        "type": event_type,
        "createdAt": iso(created_at),
        "applicationId": str(application_id),
        "data": data,
    }
