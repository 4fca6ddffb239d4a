"""Stripe's events: the ones payorch's endpoint receives, their signature check and translation.

Each event is verified with the SDK (`stripe.WebhookSignature.verify_header`: `Stripe-Signature`,
the endpoint's `whsec_` secret, 300 s tolerance) and translated into a `ProviderEvent`. payorch's ids
come back from what the adapter put on Stripe's objects: `client_reference_id` and metadata
(`payorch_session_id`) on the Checkout Session and its PaymentIntent, `payorch_refund_id` on refunds.
An authentic event about something payorch did not create (the account may serve other integrations)
translates without ids or to `IGNORED`, never to `EventRejected`: Stripe would retry it for days.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import stripe

from payorch.providers.base import EventKind, EventRejected, ProviderEvent
from payorch.values.statuses import FailureReason

if TYPE_CHECKING:
    from stripe.params import WebhookEndpointCreateParams

SIGNATURE_HEADER = "Stripe-Signature"
TOLERANCE_S = 300
# The API version of the events Stripe sends to the endpoints payorch registers: the SDK's own, so
# payloads have the shape this module reads (a test keeps the two equal).
EVENTS_API_VERSION: Final = "2026-10-28.endive"

# Stripe's refund failure_reason -> payorch's failure reason; anything else is PAYMENT_FAILED.
_REFUND_FAILURES: Final[Mapping[str, FailureReason]] = {
    "lost_or_stolen_card": FailureReason.LOST_OR_STOLEN_CARD,
    "expired_or_canceled_card": FailureReason.EXPIRED_OR_CANCELED_CARD,
    "insufficient_funds": FailureReason.INSUFFICIENT_FUNDS,
}
# Stripe's decline codes of a failed payment attempt -> payorch's; anything else is PAYMENT_FAILED.
_DECLINES: Final[Mapping[str, FailureReason]] = {
    "card_declined": FailureReason.CARD_DECLINED,
    "generic_decline": FailureReason.CARD_DECLINED,
    "insufficient_funds": FailureReason.INSUFFICIENT_FUNDS,
    "lost_card": FailureReason.LOST_OR_STOLEN_CARD,
    "stolen_card": FailureReason.LOST_OR_STOLEN_CARD,
    "expired_card": FailureReason.EXPIRED_OR_CANCELED_CARD,
}


def endpoint_params(url: str) -> WebhookEndpointCreateParams:
    """The webhook endpoint payorch registers for `url`: the events translated below, in the SDK's
    API version."""
    return {
        "url": url,
        "enabled_events": [
            "checkout.session.completed",
            "checkout.session.async_payment_succeeded",
            "checkout.session.async_payment_failed",
            "checkout.session.expired",
            "payment_intent.payment_failed",
            "refund.created",
            "refund.updated",
            "refund.failed",
            "charge.refunded",
            "charge.dispute.closed",
        ],
        "api_version": EVENTS_API_VERSION,
        "description": "payorch: checkout, refund and dispute events",
    }


def parse_stripe_event(headers: Mapping[str, str], body: bytes, secret: str) -> ProviderEvent:
    """Verify `body`'s `Stripe-Signature` with `secret` and translate the event; `EventRejected`
    when it is not authentic or not a Stripe event."""
    signature = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), None)
    try:
        stripe.WebhookSignature.verify_header(body, signature, secret, TOLERANCE_S)
    except (stripe.SignatureVerificationError, UnicodeDecodeError) as error:
        raise EventRejected(f"{SIGNATURE_HEADER}: {error}") from None
    try:
        event = json.loads(body)
        event_id, event_type, found = event["id"], event["type"], event["data"]["object"]
        if not isinstance(event_id, str) or not isinstance(event_type, str) or not isinstance(found, dict):
            raise TypeError("id and type must be strings, data.object an object")
    except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError is a ValueError
        raise EventRejected(f"not a Stripe event: {error}") from None
    translate = _TRANSLATIONS.get(event_type)
    if translate is None:
        return ProviderEvent(id=event_id, kind=EventKind.IGNORED)
    return translate(event_id, found)


def _checkout_paid(event_id: str, checkout: dict[str, Any]) -> ProviderEvent:
    # `completed` with `unpaid` is a delayed payment method still under way: its outcome follows as
    # checkout.session.async_payment_succeeded or _failed.
    if checkout.get("payment_status") != "paid":
        return ProviderEvent(id=event_id, kind=EventKind.IGNORED)
    return _about_checkout(event_id, EventKind.PAYMENT_SUCCEEDED, checkout)


def _about_checkout(
    event_id: str, kind: EventKind, checkout: dict[str, Any], reason: FailureReason | None = None
) -> ProviderEvent:
    return ProviderEvent(
        id=event_id,
        kind=kind,
        session_id=_uuid(checkout.get("client_reference_id"))
        or _uuid(_metadata(checkout, "payorch_session_id")),
        checkout_reference=_text(checkout.get("id")),
        reason=reason,
        # The PaymentIntent a paid checkout made: payorch keeps it, as Stripe's balance
        # transactions name a payment by it (`settlements`).
        payment_reference=_text(checkout.get("payment_intent"))
        if kind is EventKind.PAYMENT_SUCCEEDED
        else None,
    )


def _payment_failed(event_id: str, payment_intent: dict[str, Any]) -> ProviderEvent:
    _, reason = last_decline(payment_intent) or (None, FailureReason.PAYMENT_FAILED)
    return ProviderEvent(
        id=event_id,
        kind=EventKind.PAYMENT_DECLINED,
        session_id=_uuid(_metadata(payment_intent, "payorch_session_id")),
        reason=reason,
    )


def last_decline(payment_intent: Mapping[str, Any]) -> tuple[str | None, FailureReason] | None:
    """A PaymentIntent's last failed attempt (`last_payment_error`): Stripe's code for it (the
    card's `decline_code`, else the error's `code`) and payorch's reason; None when it has none."""
    error = payment_intent.get("last_payment_error")
    if not isinstance(error, dict):
        return None
    codes = [code for code in (error.get("decline_code"), error.get("code")) if isinstance(code, str)]
    reason = next((_DECLINES[code] for code in codes if code in _DECLINES), FailureReason.PAYMENT_FAILED)
    return (codes[0] if codes else None), reason


def refund_outcome(event_id: str, refund: dict[str, Any]) -> ProviderEvent:
    """A refund's state as payorch's event `event_id`: its outcome once Stripe settled it."""
    status = refund.get("status")
    if status == "succeeded":
        kind, reason = EventKind.REFUND_SUCCEEDED, None
    elif status in ("failed", "canceled"):
        kind = EventKind.REFUND_FAILED
        reason = _REFUND_FAILURES.get(str(refund.get("failure_reason")), FailureReason.PAYMENT_FAILED)
    else:  # pending, requires_action: the outcome follows as refund.updated or refund.failed
        return ProviderEvent(id=event_id, kind=EventKind.IGNORED)
    return ProviderEvent(
        id=event_id,
        kind=kind,
        session_id=_uuid(_metadata(refund, "payorch_session_id")),
        refund_id=_uuid(_metadata(refund, "payorch_refund_id")),
        reason=reason,
    )


def _charge_refunded(event_id: str, charge: dict[str, Any]) -> ProviderEvent:
    # A charge has not listed its refunds since API version 2022-11-15: the refunds of its
    # PaymentIntent are one API call away (`StripeProvider.resolve_event` makes it).
    return ProviderEvent(
        id=event_id, kind=EventKind.REFUNDS_CHANGED, payment_reference=_text(charge.get("payment_intent"))
    )


def _dispute_closed(event_id: str, dispute: dict[str, Any]) -> ProviderEvent:
    # A dispute names its PaymentIntent by id only: the payorch ids are on that PaymentIntent's
    # metadata, one API call away (`StripeProvider.resolve_event` makes it). Metadata a dispute
    # carries itself is used as it is.
    if dispute.get("status") != "lost":
        return ProviderEvent(id=event_id, kind=EventKind.IGNORED)
    return ProviderEvent(
        id=event_id,
        kind=EventKind.DISPUTE_LOST,
        session_id=_uuid(_metadata(dispute, "payorch_session_id")),
        payment_reference=_text(dispute.get("payment_intent")),
    )


_TRANSLATIONS: Final[Mapping[str, Callable[[str, dict[str, Any]], ProviderEvent]]] = {
    "checkout.session.completed": _checkout_paid,
    "checkout.session.async_payment_succeeded": lambda event_id, checkout: _about_checkout(
        event_id, EventKind.PAYMENT_SUCCEEDED, checkout
    ),
    "checkout.session.async_payment_failed": lambda event_id, checkout: _about_checkout(
        event_id, EventKind.PAYMENT_DECLINED, checkout, FailureReason.PAYMENT_FAILED
    ),
    "checkout.session.expired": lambda event_id, checkout: _about_checkout(
        event_id, EventKind.CHECKOUT_EXPIRED, checkout
    ),
    "payment_intent.payment_failed": _payment_failed,
    "refund.created": refund_outcome,
    "refund.updated": refund_outcome,
    "refund.failed": refund_outcome,
    "charge.refunded": _charge_refunded,
    "charge.dispute.closed": _dispute_closed,
}


def payorch_session_id(metadata: Mapping[str, Any] | None) -> uuid.UUID | None:
    """payorch's session id in a Stripe object's `metadata`; None when it has none."""
    return _uuid(metadata.get("payorch_session_id")) if metadata else None


def _metadata(found: dict[str, Any], key: str) -> Any:
    metadata = found.get("metadata")
    return metadata.get(key) if isinstance(metadata, dict) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _uuid(value: Any) -> uuid.UUID | None:
    """payorch's id in `value`; None for anything else (the account may serve other integrations too)."""
    try:
        return uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None
