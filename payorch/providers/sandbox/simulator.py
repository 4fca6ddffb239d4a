"""What the sandbox provider does on its own side: outcomes from test data, and the events they queue.

The units of work here (`pay_checkout`, `refund_checkout`) run inside one database transaction
each (`db.transaction(pay_checkout, ...)`), composed from `storage.sandbox`: an outcome and the
events announcing it commit together, so an event is never lost nor sent for an outcome that did
not happen.

Event bodies, as delivered:

    {"id": "evt_sbx_...", "type": "checkout.paid", "created": <unix seconds>,
     "data": {"checkout_id": "cs_sbx_...", "client_reference": "<payorch session id>",
              "amount": <minor units>, "currency": "PLN", "payment_method": "card",
              "metadata": {"application_id": "<payorch application id>"}, ...}}

`checkout.payment_failed` adds `failure_code`; `dispute.lost` adds `dispute_id`; `refund.succeeded`
and `refund.failed` carry the refund's `refund_id`, `refund_client_reference` (payorch's refund id),
`amount` and `currency` (of the refund), and `refund.failed` adds `failure_code`. Failure codes are
the sandbox's own, lower case (`card_declined`, ...); the adapter translates them.
"""

from __future__ import annotations

import enum
import json
import secrets
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payorch.storage import sandbox as store
from payorch.storage import sandbox_settlements
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread

_BASE62 = string.digits + string.ascii_letters


def new_id(prefix: str) -> str:
    """A provider-side id: `prefix` + 24 random base62 characters (about 143 bits), from one read
    of 256 random bits (bias of the reduction below 2**-113)."""
    number = int.from_bytes(secrets.token_bytes(32)) % 62**24
    characters = []
    for _ in range(24):
        number, digit = divmod(number, 62)
        characters.append(_BASE62[digit])
    return prefix + "".join(characters)


# Failure codes on the sandbox's wire.
CARD_DECLINED = "card_declined"
INSUFFICIENT_FUNDS = "insufficient_funds"
LOST_OR_STOLEN_CARD = "lost_or_stolen_card"
PAYMENT_FAILED = "payment_failed"


@dataclass(frozen=True)
class Outcome:
    """What paying with one test instrument does."""

    paid: bool
    failure_code: str | None = None
    refund_failure_code: str | None = None  # every later refund of the payment fails with this
    dispute_lost: bool = False  # a lost dispute follows the payment
    settlement_quirk: str | None = None  # settles otherwise than paid (`sandbox_settlements`)


# How a paid checkout may settle otherwise than it was paid (docs/reconciliation.md).
SETTLED_SHORT = "short"  # 1% short, at least one minor unit
UNREPORTED = "unreported"  # paid and settled, but no event ever tells payorch
PAYOUT_SHORT = "payout_short"  # settled in full, in a payout one minor unit short
UNSETTLED = "unsettled"  # paid and reported, never settled


@dataclass(frozen=True)
class Instrument:
    kind: str  # "card" or "blik"
    value: str  # what to type
    outcome: Outcome
    description: str


SUCCESS = Outcome(paid=True)

TEST_CARDS: dict[str, Instrument] = {
    card.value: card
    for card in (
        Instrument("card", "4242424242424242", SUCCESS, "payment succeeds"),
        Instrument(
            "card",
            "4000000000000002",
            Outcome(paid=False, failure_code=CARD_DECLINED),
            "declined (CARD_DECLINED); the customer may try again",
        ),
        Instrument(
            "card",
            "4000000000009995",
            Outcome(paid=False, failure_code=INSUFFICIENT_FUNDS),
            "declined (INSUFFICIENT_FUNDS); the customer may try again",
        ),
        Instrument(
            "card",
            "4000000000005126",
            Outcome(paid=True, refund_failure_code=LOST_OR_STOLEN_CARD),
            "payment succeeds; every refund of it fails (LOST_OR_STOLEN_CARD)",
        ),
        Instrument(
            "card",
            "4000000000000259",
            Outcome(paid=True, dispute_lost=True),
            "payment succeeds; a lost dispute follows",
        ),
        Instrument(
            "card",
            "4000000000000077",
            Outcome(paid=True, settlement_quirk=SETTLED_SHORT),
            "payment succeeds; the sandbox settles it 1% short",
        ),
        Instrument(
            "card",
            "4000000000000341",
            Outcome(paid=True, settlement_quirk=UNREPORTED),
            "payment succeeds and settles, but no event reports it",
        ),
        Instrument(
            "card",
            "4000000000000093",
            Outcome(paid=True, settlement_quirk=PAYOUT_SHORT),
            "payment succeeds; the payout carrying it is one minor unit short",
        ),
        Instrument(
            "card",
            "4000000000000119",
            Outcome(paid=True, settlement_quirk=UNSETTLED),
            "payment succeeds and is reported, but the sandbox never settles it",
        ),
    )
}
BLIK_SUCCESS_CODE = "777123"
TEST_BLIK_CODES: dict[str, Instrument] = {
    BLIK_SUCCESS_CODE: Instrument("blik", BLIK_SUCCESS_CODE, SUCCESS, "payment succeeds"),
}
OTHER_CARD = Instrument(
    "card", "any other number", Outcome(paid=False, failure_code=CARD_DECLINED), "declined (CARD_DECLINED)"
)
OTHER_BLIK = Instrument(
    "blik", "any other code", Outcome(paid=False, failure_code=PAYMENT_FAILED), "declined (PAYMENT_FAILED)"
)
# The table shown on the checkout page, in order.
TEST_DATA: tuple[Instrument, ...] = (
    *TEST_CARDS.values(),
    OTHER_CARD,
    *TEST_BLIK_CODES.values(),
    OTHER_BLIK,
)

# Which form field a payment method's page asks for.
CARD_FIELD = "card_number"
BLIK_FIELD = "blik_code"
FIELD_OF_METHOD = {"card": CARD_FIELD, "apple_pay": CARD_FIELD, "blik": BLIK_FIELD}


def normalised_entry(entry: str) -> str:
    """What the customer typed, without the spaces and dashes people put in card numbers and codes."""
    return "".join(entry.split()).replace("-", "")


def outcome_of(payment_method: str, entry: str) -> Outcome:
    """The outcome of paying a `payment_method` checkout with `entry` (card number or BLIK code)."""
    typed = normalised_entry(entry)
    if FIELD_OF_METHOD.get(payment_method) == BLIK_FIELD:
        return TEST_BLIK_CODES[typed].outcome if typed in TEST_BLIK_CODES else OTHER_BLIK.outcome
    return TEST_CARDS[typed].outcome if typed in TEST_CARDS else OTHER_CARD.outcome


class EventType(enum.StrEnum):
    CHECKOUT_PAID = "checkout.paid"
    CHECKOUT_PAYMENT_FAILED = "checkout.payment_failed"
    DISPUTE_LOST = "dispute.lost"
    REFUND_SUCCEEDED = "refund.succeeded"
    REFUND_FAILED = "refund.failed"


def event_body(event_id: str, event_type: EventType, data: dict[str, Any], *, created: int) -> str:
    """The JSON body of an event, as every delivery of it sends it."""
    return json.dumps(
        {"id": event_id, "type": event_type.value, "created": created, "data": data}, separators=(",", ":")
    )


def _checkout_data(checkout: store.SandboxCheckout) -> dict[str, Any]:
    return {
        "checkout_id": checkout.id,
        "client_reference": checkout.client_reference,
        "amount": checkout.amount_minor,
        "currency": checkout.currency,
        "payment_method": checkout.payment_method,
        "metadata": {"application_id": str(checkout.application_id)},
    }


@on_database_thread
async def _queue(
    conn: Connection,
    checkout: store.SandboxCheckout,
    event_type: EventType,
    data: dict[str, Any],
    *,
    now: datetime,
    delay_ms: int = 0,
    refund_id: str | None = None,
) -> store.SandboxEvent:
    event_id = new_id("evt_sbx_")
    created = int(now.timestamp() + delay_ms / 1000)  # the moment the event happens
    return await store.queue_event(
        conn,
        event_id=event_id,
        account=checkout.account,
        event_type=event_type,
        checkout_id=checkout.id,
        refund_id=refund_id,
        body=event_body(event_id, event_type, data, created=created),
        delay_ms=delay_ms,
        now=now,
    )


# Paying a checkout


class PaymentStatus(enum.Enum):
    PAID = "paid"
    DECLINED = "declined"
    NOT_FOUND = "not_found"
    ALREADY_PAID = "already_paid"
    EXPIRED = "expired"


@dataclass(frozen=True)
class PaymentResult:
    status: PaymentStatus
    checkout: store.SandboxCheckout | None = None
    failure_code: str | None = None


@on_database_thread
async def pay_checkout(
    conn: Connection, checkout_id: str, entry: str, *, dispute_delay_ms: int, now: datetime
) -> PaymentResult:
    """Pay the checkout with the card number or BLIK code `entry`, and queue the events that follow.

    A declined payment leaves the checkout open (the customer may try again); a paid or expired
    checkout cannot be paid."""
    checkout = await store.lock_checkout(conn, checkout_id)
    if checkout is None:
        return PaymentResult(PaymentStatus.NOT_FOUND)
    if checkout.status == "paid":
        return PaymentResult(PaymentStatus.ALREADY_PAID, checkout)
    if checkout.expired(now):
        return PaymentResult(PaymentStatus.EXPIRED, checkout)
    outcome = outcome_of(checkout.payment_method, entry)
    if not outcome.paid:
        data = {**_checkout_data(checkout), "failure_code": outcome.failure_code}
        await _queue(conn, checkout, EventType.CHECKOUT_PAYMENT_FAILED, data, now=now)
        return PaymentResult(PaymentStatus.DECLINED, checkout, outcome.failure_code)
    paid = await store.mark_checkout_paid(
        conn, checkout.id, refund_failure_code=outcome.refund_failure_code, now=now
    )
    if outcome.settlement_quirk is not None:
        await sandbox_settlements.set_settlement_quirk(conn, paid.id, outcome.settlement_quirk)
    if outcome.settlement_quirk != UNREPORTED:
        await _queue(conn, paid, EventType.CHECKOUT_PAID, _checkout_data(paid), now=now)
    if outcome.dispute_lost:
        # Both delays count from `now`, which is also `paid_at`.
        data = {**_checkout_data(paid), "dispute_id": new_id("dp_sbx_")}
        await _queue(conn, paid, EventType.DISPUTE_LOST, data, now=now, delay_ms=dispute_delay_ms)
    return PaymentResult(PaymentStatus.PAID, paid)


# Refunding a paid checkout


class RefundRefused(Exception):
    """The sandbox refuses the refund (as a provider answers 4xx): the message says why."""


@dataclass(frozen=True)
class RefundOrder:
    account: str
    idempotency_key: str
    checkout_id: str
    amount_minor: int
    currency: str
    client_reference: str
    reason: str | None


@on_database_thread
async def refund_checkout(
    conn: Connection, order: RefundOrder, *, refund_delay_ms: int, now: datetime
) -> store.SandboxRefund:
    """Refund part or all of a paid checkout of the account; the outcome event follows after
    `refund_delay_ms`. The same idempotency key gives back the refund it made first; `RefundRefused`
    for a checkout that is unknown, not paid, or already refunded beyond `amount_minor`."""
    # Lock first: refunds of one checkout, and retries of one key, then run one at a time.
    checkout = await store.lock_checkout(conn, order.checkout_id)
    if checkout is None or checkout.account != order.account:
        raise RefundRefused(f"no checkout {order.checkout_id} in this account")
    existing = await store.find_refund(conn, order.account, order.idempotency_key)
    if existing is not None:
        return _same_refund(existing, order)
    if checkout.status != "paid":
        raise RefundRefused(f"checkout {checkout.id} is not paid")
    if order.currency != checkout.currency:
        raise RefundRefused(f"checkout {checkout.id} was paid in {checkout.currency}")
    if order.amount_minor <= 0:
        raise RefundRefused("a refund amount must be positive")
    if await store.refunded_minor(conn, checkout.id) + order.amount_minor > checkout.amount_minor:
        raise RefundRefused(f"refunds of checkout {checkout.id} would exceed the amount paid")
    failure_code = checkout.refund_failure_code
    refund, created = await store.insert_refund(
        conn,
        store.NewRefund(
            id=new_id("re_sbx_"),
            account=order.account,
            idempotency_key=order.idempotency_key,
            checkout_id=checkout.id,
            amount_minor=order.amount_minor,
            currency=order.currency,
            client_reference=order.client_reference,
            reason=order.reason,
            outcome="failed" if failure_code else "succeeded",
            failure_code=failure_code,
            delay_ms=refund_delay_ms,
        ),
        now=now,
    )
    if not created:  # the key was used for a refund of another checkout
        return _same_refund(refund, order)
    data: dict[str, Any] = {
        **_checkout_data(checkout),
        "refund_id": refund.id,
        "refund_client_reference": refund.client_reference,
        "amount": refund.amount_minor,
        "currency": refund.currency,
    }
    if failure_code:
        data["failure_code"] = failure_code
    event_type = EventType.REFUND_FAILED if failure_code else EventType.REFUND_SUCCEEDED
    await _queue(conn, checkout, event_type, data, now=now, delay_ms=refund_delay_ms, refund_id=refund.id)
    return refund


def _same_refund(existing: store.SandboxRefund, order: RefundOrder) -> store.SandboxRefund:
    if (existing.checkout_id, existing.amount_minor, existing.client_reference) != (
        order.checkout_id,
        order.amount_minor,
        order.client_reference,
    ):
        raise RefundRefused("idempotency key already used for another refund")
    return existing
