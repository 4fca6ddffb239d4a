"""Mollie's classic webhook, and what payorch reads from the objects it names.

Mollie calls the `webhookUrl` of a payment (https://docs.mollie.com/reference/webhooks) whenever the
payment's status changes, and also when one of its refunds or chargebacks changes: a form body with
one field, `id=tr_...`, unsigned. The status is deliberately not in the call: payorch fetches the
payment (and, where its `_links` say it has any, its refunds and chargebacks) with the merchant's
stored key and applies what it reads there (`MollieProvider.resolve_event`). A forged call names a
payment the key cannot read (nothing happens) or a real one (its real state is applied, once).

Each state read becomes an event whose id is the object and its state (`tr_x:paid`,
`tr_x/re_y:refunded`, `tr_x/chb_z:chargeback`), so it is applied once however often Mollie calls.

A failed payment's reason is its card's `details.failureReason` translated (`_DECLINES`: an
issuer's refusal is `CARD_DECLINED`, `insufficient_funds` and `card_expired` keep their meaning,
every other code `PAYMENT_FAILED`), the same on the way back and in the event; a failed payment
without one (not a card's) and a canceled one are `PAYMENT_FAILED`.

When the customer comes back from Mollie's checkout (after any final status), `payment_state` says
what the payment read then is: paid; still processing (`open`: Mollie says the customer can still
complete it, as a bank transfer waiting for its money for days does; `pending`: BLIK waiting for
the customer's bank; `authorized`: the money is held, not yet captured), so no other attempt may
open; or declined with its code (a card payment's `details.failureReason`, else its status
`failed`). A payment the customer canceled, or one that expired, is none of these.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qs

from payorch.providers.base import CheckoutState, EventKind, EventRejected, ProviderEvent
from payorch.values.statuses import FailureReason

# Mollie's final payment statuses -> payorch's event kinds; open, pending and authorized say nothing
# payorch acts on. A failed or canceled Mollie payment cannot be paid any more, but the session stays
# PENDING (as for a declined attempt anywhere) until it expires. A failed one's reason is its code's.
_PAYMENT_OUTCOMES: Final[Mapping[str, tuple[EventKind, FailureReason | None]]] = {
    "paid": (EventKind.PAYMENT_SUCCEEDED, None),
    "failed": (EventKind.PAYMENT_DECLINED, FailureReason.PAYMENT_FAILED),
    "canceled": (EventKind.PAYMENT_DECLINED, FailureReason.PAYMENT_FAILED),
    "expired": (EventKind.CHECKOUT_EXPIRED, None),
}
# A card payment's `details.failureReason` -> payorch's reason; any other code is PAYMENT_FAILED
# (https://docs.mollie.com/reference/get-payment, `details.failureReason`). Which codes are hard
# (never retried at another provider) is the decline table's (`engine.routing.recovery`).
_DECLINES: Final[Mapping[str, FailureReason]] = {
    "card_declined": FailureReason.CARD_DECLINED,
    "refused_by_issuer": FailureReason.CARD_DECLINED,
    "insufficient_funds": FailureReason.INSUFFICIENT_FUNDS,
    "card_expired": FailureReason.EXPIRED_OR_CANCELED_CARD,
}
# Statuses whose payment may still be paid: no other attempt may open while it is one of them.
_PROCESSING: Final = frozenset({"open", "pending", "authorized"})
# Mollie's object ids: a prefix naming the kind, an underscore, then letters and digits
# (`tr_7UhSN1zuXS`). Only such an id is ever put into a Mollie API path.
_MOLLIE_ID: Final = re.compile(r"[a-z]{1,10}_[A-Za-z0-9]{1,64}")

# Mollie's final refund statuses; queued, pending and processing are on their way.
_REFUND_OUTCOMES: Final[Mapping[str, EventKind]] = {
    "refunded": EventKind.REFUND_SUCCEEDED,
    "failed": EventKind.REFUND_FAILED,
    "canceled": EventKind.REFUND_FAILED,
}


def parse_webhook(body: bytes) -> ProviderEvent:
    """The payment a webhook call names, to be read from Mollie; `EventRejected` when the body is
    not Mollie's form with one `id`. An id that is not a payment's is authentic-looking noise."""
    try:
        fields = parse_qs(body.decode("ascii"), strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise EventRejected("not a Mollie webhook call: the body is not a form with an id") from None
    ids = fields.get("id", [])
    if len(ids) != 1 or not ids[0]:
        raise EventRejected("not a Mollie webhook call: it names no id")
    object_id = ids[0]
    if _MOLLIE_ID.fullmatch(object_id) is None:
        raise EventRejected("not a Mollie webhook call: its id is not of Mollie's form")
    if not object_id.startswith("tr_"):
        return ProviderEvent(id=f"webhook:{object_id}", kind=EventKind.IGNORED)
    return ProviderEvent(
        id=f"webhook:{object_id}", kind=EventKind.PROVIDER_OBJECT_CHANGED, payment_reference=object_id
    )


def payment_outcome(payment: Mapping[str, Any]) -> ProviderEvent | None:
    """The payment's state as payorch's event, once Mollie settled it; None while it is open."""
    status = payment.get("status")
    found = _PAYMENT_OUTCOMES.get(status) if isinstance(status, str) else None
    if found is None:
        return None
    kind, reason = found
    if status == "failed":
        reason = decline(payment)[1]
    return ProviderEvent(
        id=f"{payment.get('id')}:{status}",
        kind=kind,
        session_id=payorch_id(payment, "payorch_session_id"),
        checkout_reference=_text(payment.get("id")),
        reason=reason,
    )


def payment_state(payment: Mapping[str, Any]) -> CheckoutState:
    """The payment as its customer comes back from it: paid; processing (open, pending or
    authorized: it may still be paid); declined (`failed`, with `decline`'s code and reason); or
    none of these (canceled by the customer, expired)."""
    status = payment.get("status")
    if status == "paid":
        return CheckoutState(paid=True)
    if status in _PROCESSING:
        return CheckoutState(paid=False, processing=True)
    if status != "failed":
        return CheckoutState(paid=False)
    code, reason = decline(payment)
    return CheckoutState(paid=False, decline_code=code, decline_reason=reason)


def decline(payment: Mapping[str, Any]) -> tuple[str, FailureReason]:
    """A failed payment's code (a card payment's `details.failureReason`, else `failed`) and
    payorch's reason for it."""
    details = payment.get("details")
    code = details.get("failureReason") if isinstance(details, Mapping) else None
    if not isinstance(code, str) or not code:
        return "failed", FailureReason.PAYMENT_FAILED
    return code, _DECLINES.get(code, FailureReason.PAYMENT_FAILED)


def refund_outcome(payment: Mapping[str, Any], refund: Mapping[str, Any]) -> ProviderEvent | None:
    """A refund's outcome once Mollie settled it; None while it is on its way or not payorch's."""
    status = refund.get("status")
    kind = _REFUND_OUTCOMES.get(status) if isinstance(status, str) else None
    refund_id = payorch_id(refund, "payorch_refund_id")
    if kind is None or refund_id is None:
        return None
    return ProviderEvent(
        id=f"{payment.get('id')}/{refund.get('id')}:{status}",
        kind=kind,
        session_id=payorch_id(payment, "payorch_session_id"),
        refund_id=refund_id,
        reason=FailureReason.PAYMENT_FAILED if kind is EventKind.REFUND_FAILED else None,
    )


def chargeback_outcome(payment: Mapping[str, Any], chargeback: Mapping[str, Any]) -> ProviderEvent | None:
    """A chargeback is a lost dispute: Mollie has debited the amount by the time it reports one. A
    reversed chargeback (`reversedAt`) was withdrawn by the bank: nothing to apply."""
    if chargeback.get("reversedAt"):
        return None
    return ProviderEvent(
        id=f"{payment.get('id')}/{chargeback.get('id')}:chargeback",
        kind=EventKind.DISPUTE_LOST,
        session_id=payorch_id(payment, "payorch_session_id"),
        checkout_reference=_text(payment.get("id")),
    )


def has_link(found: Mapping[str, Any], name: str) -> bool:
    """Whether a Mollie object's HAL `_links` names `name` (a payment links `refunds` and
    `chargebacks` only when it has some)."""
    links = found.get("_links")
    return isinstance(links, dict) and isinstance(links.get(name), dict)


def payorch_id(found: Mapping[str, Any], key: str) -> uuid.UUID | None:
    """payorch's id under `key` in a Mollie object's metadata; None for anything else (the account
    may serve other integrations too)."""
    metadata = found.get("metadata")
    value = metadata.get(key) if isinstance(metadata, dict) else None
    try:
        return uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
