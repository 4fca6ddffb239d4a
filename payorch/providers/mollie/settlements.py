"""What Mollie settled for an organization (`providers.settlements`), read from Mollie's Settlements API
with the account's organization access token (`credentials`; the API takes no API key).

- A settlement (`stl_...`) is Mollie's payout: its `amount` reaches the merchant's bank once it is
  `paidout`, on the day of its `settledAt`. Settlements are listed newest first (`from` cursor,
  `limit` up to 250); those settled on the days asked for are read, and reading stops at the first
  page whose settlements were all created `LOOKBACK_DAYS` before the first day.
- Its items are its payments, refunds and chargebacks (`/v2/settlements/{id}/payments`, `/refunds`,
  `/chargebacks`, each paginated the same way), each settled on the settlement's day, their
  `settlementAmount` the gross (a refund's and a chargeback's negative, as Mollie writes them). A
  payment's item names it by its id `tr_...`, which is payorch's reference of a Mollie checkout;
  a refund's by its payment's id and its own `re_...`, which payorch stores as the refund's
  reference.
- Mollie charges its fees per settlement, not per payment: a payment's item has no fee, and the
  settlement's costs (`periods.<year>.<month>.costs`, one line per method and rate, `amountGross`
  with VAT) are `FEE` items of their own, so that the items of a settlement sum to its amount.
- Mollie settles live payments only: an organization in test mode has no settlements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

import requests
from mollie.api.client import Client
from mollie.api.objects.settlement import Settlement
from mollie.api.resources.chargebacks import SettlementChargebacks
from mollie.api.resources.payments import SettlementPayments
from mollie.api.resources.refunds import SettlementRefunds

from payorch.providers.base import ProviderError
from payorch.providers.mollie.amounts import MOLLIE_METHODS
from payorch.providers.settlements import Payout, SettledItem, SettledKind
from payorch.values.money import currency_exponent

# Mollie's default payout schedule is daily, and a paid payment joins the settlement of the next
# business day: reconciliation waits this long before it calls a recorded payment missing.
SETTLEMENT_LAG_DAYS: Final = 2
# How long before it is paid out a settlement may have been created (a weekly or monthly schedule).
LOOKBACK_DAYS: Final = 35
PAGE_SIZE: Final = 250  # Mollie's largest page
_METHODS: Final = {mollie: payorch for payorch, mollie in MOLLIE_METHODS.items()}
# A settlement's items: the list beside it, the objects' name in `_embedded`, their kind.
ITEM_LISTS: Final = (
    (SettlementPayments, "payments", SettledKind.PAYMENT),
    (SettlementRefunds, "refunds", SettledKind.REFUND),
    (SettlementChargebacks, "chargebacks", SettledKind.CHARGEBACK),
)


class OrganizationTokenMissing(ProviderError):
    """The account was linked without an organization access token: its settlements cannot be read."""

    def __init__(self) -> None:
        super().__init__(
            "Mollie's settlements can only be read with an organization access token: replace Mollie's "
            "credentials with apiKey and organizationToken (created in Mollie's dashboard under "
            "Developers > Organization access tokens, with settlements.read, payments.read and "
            "refunds.read)"
        )


Page = tuple[list[dict[str, Any]], str | None]  # a page's objects, and the cursor of the next
T = TypeVar("T")


class RetryAfter:
    """The `Retry-After` header of the last answer a call's client received (the SDK's errors carry
    Mollie's status and detail, not its headers)."""

    def __init__(self) -> None:
        self.value: str | None = None

    def remembered(self, work: Callable[[Client], T]) -> Callable[[Client], T]:
        """`work`, on a client whose HTTP session (the one the SDK would make on its first request)
        remembers each answer's `Retry-After` here."""

        def remembering(client: Client) -> T:
            session = requests.Session()
            session.hooks["response"].append(self._remember)
            client._client = session  # the SDK makes this session itself unless one is there
            return work(client)

        return remembering

    def _remember(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        self.value = response.headers.get("Retry-After")


def settlements_page(client: Client, cursor: str | None) -> Page:
    """One page of the organization's settlements, newest first (in the SDK's worker thread)."""
    return _page(client.settlements.list(**_params(cursor)), "settlements")


def items_page(client: Client, settlement_id: str, which: int, cursor: str | None) -> Page:
    """One page of the settlement's payments, refunds or chargebacks (`ITEM_LISTS[which]`)."""
    resource, name, _ = ITEM_LISTS[which]
    settlement = Settlement({"id": settlement_id}, client)  # type: ignore[no-untyped-call]
    return _page(resource(client, settlement).list(**_params(cursor)), name)


def settlement(client: Client, settlement_id: str) -> dict[str, Any]:
    """The settlement `settlement_id` (for its periods' costs)."""
    return dict(client.settlements.get(settlement_id))


def _params(cursor: str | None) -> dict[str, Any]:
    return {"limit": PAGE_SIZE, **({"from": cursor} if cursor else {})}


def _page(listing: Mapping[str, Any], name: str) -> Page:
    raw = dict(listing)
    embedded = raw.get("_embedded")
    found = embedded.get(name) if isinstance(embedded, dict) else None
    objects = [dict(each) for each in found if isinstance(each, dict)] if isinstance(found, list) else []
    links = raw.get("_links")
    following = links.get("next") if isinstance(links, dict) else None
    href = following.get("href") if isinstance(following, dict) else None
    cursor = parse_qs(urlsplit(href).query).get("from", [None])[0] if isinstance(href, str) else None
    return objects, cursor


def settled_on(found: Mapping[str, Any]) -> date | None:
    """The UTC day a settlement was paid out; None while it is open or pending."""
    return _day(found.get("settledAt"))


def created_on(found: Mapping[str, Any]) -> date | None:
    return _day(found.get("createdAt"))


def is_older(found: list[dict[str, Any]], first: date) -> bool:
    """Whether every settlement of a page was created too long before `first` to be settled in it."""
    oldest = first - timedelta(days=LOOKBACK_DAYS)
    return all((created_on(each) or oldest) < oldest for each in found)


def payout(found: Mapping[str, Any]) -> Payout | None:
    """A settlement as payorch's payout; None while it has no day (open, pending)."""
    day = settled_on(found)
    amount = found.get("amount")
    if day is None or not isinstance(amount, dict):
        return None
    currency = str(amount.get("currency")).upper()
    return Payout(
        payout_id=str(found["id"]),
        currency=currency,
        amount_minor=_minor(amount),
        arrives_on=day,
        status=str(found.get("status")),
    )


def settled_item(found: Mapping[str, Any], kind: SettledKind, of: Payout) -> SettledItem:
    """A settlement's payment, refund or chargeback as payorch's item."""
    amount = found.get("settlementAmount") or found.get("amount")
    gross = _minor(amount) if isinstance(amount, dict) else 0
    if kind is not SettledKind.PAYMENT and gross > 0:
        gross = -gross  # a refund or chargeback Mollie writes unsigned
    payment_id = found.get("id") if kind is SettledKind.PAYMENT else found.get("paymentId")
    method = found.get("method") if kind is SettledKind.PAYMENT else None
    return SettledItem(
        item_id=str(found["id"]),
        kind=kind,
        currency=of.currency,
        gross_minor=gross,
        fee_minor=0,
        net_minor=gross,
        settled_on=of.arrives_on,
        payment_reference=payment_id if isinstance(payment_id, str) else None,
        refund_reference=str(found["id"]) if kind is SettledKind.REFUND else None,
        payout_id=of.payout_id,
        method=_METHODS.get(method) if isinstance(method, str) else None,
        created_at=_instant(found.get("createdAt")),
    )


def cost_items(found: Mapping[str, Any], of: Payout) -> list[SettledItem]:
    """The settlement's costs, one `FEE` item per line of each period (`amountGross`, VAT included)."""
    items: list[SettledItem] = []
    periods = found.get("periods")
    for year, months in sorted(periods.items()) if isinstance(periods, dict) else []:
        for month, period in sorted(months.items()) if isinstance(months, dict) else []:
            costs = period.get("costs") if isinstance(period, dict) else None
            for index, cost in enumerate(costs if isinstance(costs, list) else []):
                amount = cost.get("amountGross") if isinstance(cost, dict) else None
                if not isinstance(amount, dict):
                    continue
                charged = -abs(_minor(amount))
                method = cost.get("method")
                items.append(
                    SettledItem(
                        item_id=f"{of.payout_id}/costs/{year}-{month}/{index}",
                        kind=SettledKind.FEE,
                        currency=of.currency,
                        gross_minor=charged,
                        fee_minor=0,
                        net_minor=charged,
                        settled_on=of.arrives_on,
                        payment_reference=None,
                        refund_reference=None,
                        payout_id=of.payout_id,
                        method=_METHODS.get(method) if isinstance(method, str) else None,
                        created_at=None,
                    )
                )
    return items


def _minor(amount: Mapping[str, Any]) -> int:
    """A Mollie amount object in minor units of its currency (`"-10.00"` -> -1000)."""
    currency = str(amount.get("currency")).upper()
    try:
        value = Decimal(str(amount.get("value")))
    except InvalidOperation:
        raise ProviderError(f"Mollie answered an amount that is not one: {amount!r}") from None
    return int(value.scaleb(currency_exponent(currency)))


def _instant(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _day(value: Any) -> date | None:
    found = _instant(value)
    return found.astimezone(UTC).date() if found is not None else None
