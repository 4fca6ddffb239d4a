"""PayU's notifications: their signature, and what payorch reads in them.

PayU POSTs a JSON document to the order's `notifyUrl` whenever the order's status changes, and
whenever one of its refunds does, until it is answered 200. The header `OpenPayu-Signature` (also
sent as `X-OpenPayU-Signature`) reads `sender=checkout;signature=<hex>;algorithm=<MD5|SHA-256>;
content=DOCUMENT`: the signature is the hash of the body's exact bytes followed by the POS's second
key. It is checked first, in constant time, before the body is parsed; MD5 and SHA-256 (spelt
`SHA-256`, `SHA256` or `SHA_256`) are accepted, anything else is refused.

Order notifications (`{"order": {...}}`) carry the order and its status; payorch's session is in
`extOrderId` (`order_ext_id`). Statuses -> payorch:

- `NEW`, `PENDING`: nothing yet (not paid, or the payment is under way);
- `WAITING_FOR_CONFIRMATION`: nothing yet; the money is held until the merchant receives it in
  PayU's panel (only with auto-receive off);
- `COMPLETED`: payment succeeded;
- `CANCELED`: payment declined (`PAYMENT_FAILED`); the session stays PENDING until it expires.

Refund notifications (`{"orderId", "extOrderId", "refund": {...}}`): `FINALIZED` completes the
refund, `CANCELED` fails it (`PAYMENT_FAILED`), `PENDING` says nothing yet. They name the refund by
PayU's `refundId` (and, where PayU adds it, payorch's `extRefundId`); `PayuProvider.resolve_event`
finds payorch's refund from the order's refunds when the notification does not say.

Each notification becomes an event whose id is the object and its status (`<orderId>:COMPLETED`,
`<orderId>/<refundId>:FINALIZED`): PayU's repeats are applied once, and a status that arrives after
a later one (PENDING after COMPLETED) changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Mapping
from typing import Any, Final

from payorch.providers.base import CheckoutState, EventKind, EventRejected, ProviderEvent
from payorch.values.statuses import FailureReason

SIGNATURE_HEADERS: Final = ("openpayu-signature", "x-openpayu-signature")
_HASHES: Final = {"MD5": "md5", "SHA-256": "sha256", "SHA256": "sha256", "SHA_256": "sha256"}
_ORDER_OUTCOMES: Final[Mapping[str, tuple[EventKind, FailureReason | None]]] = {
    "COMPLETED": (EventKind.PAYMENT_SUCCEEDED, None),
    "CANCELED": (EventKind.PAYMENT_DECLINED, FailureReason.PAYMENT_FAILED),
}
_REFUND_OUTCOMES: Final[Mapping[str, tuple[EventKind, FailureReason | None]]] = {
    "FINALIZED": (EventKind.REFUND_SUCCEEDED, None),
    "CANCELED": (EventKind.REFUND_FAILED, FailureReason.PAYMENT_FAILED),
}
# Statuses of an order that may still be paid: no other attempt may open while it is one of them.
_PROCESSING: Final = frozenset({"PENDING", "WAITING_FOR_CONFIRMATION"})


def signature(body: bytes, second_key: str, algorithm: str = "MD5") -> str:
    """The signature PayU puts on `body` for the POS whose second key is `second_key`."""
    return hashlib.new(_HASHES[algorithm], body + second_key.encode()).hexdigest()


def verify(headers: Mapping[str, str], body: bytes, second_key: str) -> None:
    """`EventRejected` unless `OpenPayu-Signature` signs `body` with `second_key` (MD5 or SHA-256)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    header = next((lowered[name] for name in SIGNATURE_HEADERS if name in lowered), None)
    if header is None:
        raise EventRejected("OpenPayu-Signature is missing")
    parts = dict(part.partition("=")[::2] for part in header.strip().rstrip(";").split(";"))
    algorithm, signed = parts.get("algorithm", "").strip().upper(), parts.get("signature", "").strip()
    if algorithm not in _HASHES:
        raise EventRejected(f"OpenPayu-Signature: algorithm {algorithm[:20]!r} is not MD5 or SHA-256")
    expected = signature(body, second_key, algorithm)
    if not second_key or not hmac.compare_digest(expected.encode(), signed.lower().encode()):
        raise EventRejected("OpenPayu-Signature does not match the body")


def parse_notification(body: bytes) -> ProviderEvent:
    """The event a verified notification's body stands for; `EventRejected` when it is not PayU's."""
    try:
        document = json.loads(body)
    except ValueError:
        raise EventRejected("not a PayU notification: the body is not JSON") from None
    if not isinstance(document, dict):
        raise EventRejected("not a PayU notification: the body is not an object")
    order, refund = document.get("order"), document.get("refund")
    if isinstance(order, dict):
        return _order_event(order)
    if isinstance(refund, dict):
        return _refund_event(document, refund)
    raise EventRejected("not a PayU notification: neither an order nor a refund")


def _order_event(order: Mapping[str, Any]) -> ProviderEvent:
    order_id, status = _text(order.get("orderId")), _text(order.get("status"))
    if order_id is None or status is None:
        raise EventRejected("not a PayU order notification: no orderId or status")
    kind, reason = _ORDER_OUTCOMES.get(status, (EventKind.IGNORED, None))
    return ProviderEvent(
        id=f"{order_id}:{status}",
        kind=kind,
        session_id=session_of(order.get("extOrderId")),
        checkout_reference=order_id,
        reason=reason,
    )


def _refund_event(document: Mapping[str, Any], refund: Mapping[str, Any]) -> ProviderEvent:
    order_id, refund_id = _text(document.get("orderId")), _text(refund.get("refundId"))
    status = _text(refund.get("status"))
    if order_id is None or refund_id is None or status is None:
        raise EventRejected("not a PayU refund notification: no orderId, refundId or status")
    kind, reason = _REFUND_OUTCOMES.get(status, (EventKind.IGNORED, None))
    return ProviderEvent(
        id=f"{order_id}/{refund_id}:{status}",
        kind=kind,
        session_id=session_of(document.get("extOrderId")),
        refund_id=_uuid(refund.get("extRefundId")),
        payment_reference=order_id,
        refund_reference=refund_id,
        reason=reason,
    )


def order_state(order: Mapping[str, Any]) -> CheckoutState:
    """The order as its customer comes back from PayU's page: paid (`COMPLETED`); processing
    (`PENDING`, `WAITING_FOR_CONFIRMATION`: it may still be paid); declined (`CANCELED`: PayU
    names no reason, so `PAYMENT_FAILED`); or none of these (`NEW`: nothing was paid)."""
    status = order.get("status")
    if status == "COMPLETED":
        return CheckoutState(paid=True)
    if status in _PROCESSING:
        return CheckoutState(paid=False, processing=True)
    if status == "CANCELED":
        return CheckoutState(paid=False, decline_code="CANCELED", decline_reason=FailureReason.PAYMENT_FAILED)
    return CheckoutState(paid=False)


def order_ext_id(session_id: uuid.UUID, attempt: int, placing: int = 1) -> str:
    """The `extOrderId` of the order placed for a session's `attempt`: the session id and the
    attempt, and after a crash left an order nobody saw (`PayuProvider.create_checkout`), the
    how-many-th order placed for that attempt."""
    base = f"{session_id}-{attempt}"
    return base if placing == 1 else f"{base}-{placing}"


def session_of(ext_order_id: Any) -> uuid.UUID | None:
    """payorch's session id in an `extOrderId` of `order_ext_id`'s form; None for another's."""
    return _uuid(ext_order_id[:36]) if isinstance(ext_order_id, str) else None


def refund_id_of(refunds: list[dict[str, Any]], refund_reference: str) -> uuid.UUID | None:
    """payorch's refund id (`extRefundId`) of PayU's refund `refund_reference` among `refunds`."""
    for each in refunds:
        if each.get("refundId") == refund_reference:
            return _uuid(each.get("extRefundId"))
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None
