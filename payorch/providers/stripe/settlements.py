"""What Stripe settled for an account (`providers.settlements`): its balance transactions and payouts,
read through the SDK page by page (`limit=100`, `has_more` and `starting_after`), each page through
the caller's `PageReads` (the adapter's `_settlement_pages`: a 429 or 5xx is the caller's to retry).

- An item is a balance transaction (`txn_...`): gross `amount`, `fee`, `net` (in the currency's
  minor units, signed as they move the balance), `available_on` (the UTC day it became the
  account's: `settled_on`). Its `source` is expanded (`expand[]=data.source`) so that the item
  names its payment without another call: a charge, a refund and a dispute each name their
  PaymentIntent (`pi_...`), which is what payorch keeps for a Stripe payment when
  `checkout.session.completed` (or `async_payment_succeeded`) reports it paid
  (`checkout_sessions.provider_payment_reference`): `payment_reference` is the PaymentIntent id,
  not the Checkout Session's. A refund's `refund_reference` is its `re_...` id, which payorch
  stores as the refund's reference when Stripe creates it.
- Kinds follow the transaction's `reporting_category` (Stripe's own grouping for accounting):
  `charge` a payment, `refund` and `refund_failure` a refund (the latter positive: the money came
  back), `dispute` and `dispute_reversal` a chargeback, `fee` a fee of no one payment; the rest
  (an adjustment, a transfer, a top-up) is `OTHER`. Payout transactions are not items: payouts are
  read as payouts.
- Stripe's list takes `created` bounds, not `available_on` ones: the items of days `first` to
  `last` are read among the transactions created from `CREATED_LOOKBACK_DAYS` before `first` up to
  the end of `last`, and those available on another day are skipped.
- A payout (`po_...`) arrives on `arrival_date`; the transactions it carried are listed with
  `payout=po_...` (automatic payouts only: Stripe keeps no such link for a manual payout, whose
  items are then empty).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from payorch.providers.settlements import Payout, SettledItem, SettledKind
from payorch.providers.stripe.amounts import PAYMENT_METHODS

# Stripe's standard payout schedule makes a card payment available 2 business days after it in most
# countries (docs.stripe.com/payouts#standard-payout-timing; 7 in some, 14 for a new account in a
# few): the figure reconciliation waits by default before it calls a recorded payment missing.
SETTLEMENT_LAG_DAYS: Final = 2
# How long before its `available_on` a transaction may have been created: the longest standard
# delay of Stripe's payout schedules (a new account's first payout in some countries).
CREATED_LOOKBACK_DAYS: Final = 14
PAGE_SIZE: Final = 100

_KINDS: Final[Mapping[str, SettledKind]] = {
    "charge": SettledKind.PAYMENT,
    "refund": SettledKind.REFUND,
    "refund_failure": SettledKind.REFUND,
    "dispute": SettledKind.CHARGEBACK,
    "dispute_reversal": SettledKind.CHARGEBACK,
    "fee": SettledKind.FEE,
}
# Types whose reporting category says it less plainly, for a transaction without one.
_KINDS_BY_TYPE: Final[Mapping[str, SettledKind]] = {
    "charge": SettledKind.PAYMENT,
    "payment": SettledKind.PAYMENT,
    "refund": SettledKind.REFUND,
    "payment_refund": SettledKind.REFUND,
    "refund_failure": SettledKind.REFUND,
    "payment_failure_refund": SettledKind.REFUND,
    "stripe_fee": SettledKind.FEE,
    "stripe_fx_fee": SettledKind.FEE,
    "tax_fee": SettledKind.FEE,
}
_PAYOUT_TYPES: Final = frozenset({"payout", "payout_cancel", "payout_failure"})

# A page of the list `params` asks for, through the adapter's retrying `_request`.
PageReader = Callable[[dict[str, Any]], Awaitable[Any]]


def _day_start(day: date) -> int:
    return int(datetime.combine(day, time(), tzinfo=UTC).timestamp())


def _utc_day(timestamp: int) -> date:
    return datetime.fromtimestamp(timestamp, UTC).date()


async def _pages(read_page: PageReader, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Every object of a Stripe list, one page (`PAGE_SIZE`) at a time, as plain dicts."""
    after: str | None = None
    while True:
        page = await read_page({**params, "limit": PAGE_SIZE, **({"starting_after": after} if after else {})})
        found = [each.to_dict() for each in page.data]
        for each in found:
            yield each
        if not page.has_more or not found:
            return
        after = found[-1]["id"]


async def balance_items(read_page: PageReader, first: date, last: date) -> AsyncIterator[SettledItem]:
    """The account's balance transactions available on the UTC days `first` to `last`, as items."""
    params = {
        "created": {
            "gte": _day_start(first - timedelta(days=CREATED_LOOKBACK_DAYS)),
            "lt": _day_start(last + timedelta(days=1)),
        },
        "expand": ["data.source"],
    }
    async for transaction in _pages(read_page, params):
        if transaction.get("type") in _PAYOUT_TYPES:
            continue
        if first <= _utc_day(transaction["available_on"]) <= last:
            yield settled_item(transaction, payout_id=None)


async def payout_items(read_page: PageReader, payout_id: str) -> AsyncIterator[SettledItem]:
    """The balance transactions the automatic payout `payout_id` carried, as items."""
    async for transaction in _pages(read_page, {"payout": payout_id, "expand": ["data.source"]}):
        if transaction.get("type") not in _PAYOUT_TYPES:
            yield settled_item(transaction, payout_id=payout_id)


async def payouts(read_page: PageReader, first: date, last: date) -> AsyncIterator[Payout]:
    """The account's payouts arriving on the UTC days `first` to `last`."""
    params = {"arrival_date": {"gte": _day_start(first), "lt": _day_start(last + timedelta(days=1))}}
    async for payout in _pages(read_page, params):
        yield Payout(
            payout_id=payout["id"],
            currency=str(payout["currency"]).upper(),
            amount_minor=int(payout["amount"]),
            arrives_on=_utc_day(payout["arrival_date"]),
            status=str(payout["status"]),
        )


def settled_item(transaction: Mapping[str, Any], payout_id: str | None) -> SettledItem:
    """One balance transaction as payorch's item (see the module's docstring)."""
    kind = _KINDS.get(str(transaction.get("reporting_category")))
    if kind is None:
        kind = _KINDS_BY_TYPE.get(str(transaction.get("type")), SettledKind.OTHER)
    source = transaction.get("source")
    source = source if isinstance(source, dict) else {}
    refund_reference = None
    if kind is SettledKind.REFUND and source.get("object") == "refund":
        refund_reference = _text(source.get("id"))
    created = transaction.get("created")
    return SettledItem(
        item_id=transaction["id"],
        kind=kind,
        currency=str(transaction["currency"]).upper(),
        gross_minor=int(transaction["amount"]),
        fee_minor=int(transaction["fee"]),
        net_minor=int(transaction["net"]),
        settled_on=_utc_day(transaction["available_on"]),
        payment_reference=_text(source.get("payment_intent")),
        refund_reference=refund_reference,
        payout_id=payout_id,
        method=_method(source),
        created_at=datetime.fromtimestamp(created, UTC) if isinstance(created, int) else None,
    )


def _method(source: Mapping[str, Any]) -> str | None:
    """payorch's method of a charge (`payment_method_details.type`; Apple Pay is a card's wallet)."""
    details = source.get("payment_method_details")
    if not isinstance(details, dict):
        return None
    method = details.get("type")
    card = details.get("card")
    if method == "card" and isinstance(card, dict) and (card.get("wallet") or {}).get("type") == "apple_pay":
        return "apple_pay"
    return method if method in PAYMENT_METHODS else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
