"""What a provider settled: the money it moved for an account, item by item, and its payouts, as
reconciliation (docs/reconciliation.md) reads them. Each provider that can say so implements
`ReportsSettlements`; one that cannot (its API offers nothing) does not, and reconciliation says so.

Amounts are integer minor units of `currency`, signed as they move the account's balance: a
payment's gross is positive, a refund's negative; `fee_minor` is what the provider kept (a cost,
positive), so `net_minor == gross_minor - fee_minor` always. An item names the
payment it belongs to by the reference payorch stores for it (`payment_reference`: the checkout's
reference as the provider's `create_checkout` answered it, or the payment's own id where the
provider stores that at success: say which in the provider's module), and a refund by the
provider's refund id (`refund_reference`), so that reconciliation matches both against payorch's
rows without asking the provider again.

Reading is streamed: `settled_items` and `payouts` are async iterators over the provider's pages,
so memory stays bounded however long the period. Each page is read through the `PageReads` the
caller gives (`ask_once` by default): a page the provider answered with a 429, a 5xx or not at all
raises `SettlementsBusy` (with the provider's `Retry-After`, when it sent one) into it, which may
read that page again (reconciliation waits, for that account alone, and goes on where it was); any
other failure raises `ProviderError`.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol, TypeVar, runtime_checkable

from payorch.providers.base import Credentials, ProviderError

T = TypeVar("T")


class SettlementsBusy(ProviderError):
    """The provider answered a page of settlements with a 429 or a 5xx, or not at all: worth asking
    again. `retry_after_s` is the wait its `Retry-After` header asked for, when it sent one."""

    def __init__(self, message: str, *, retry_after_s: float | None, provider_wide: bool) -> None:
        super().__init__(message, provider_wide=provider_wide)
        self.retry_after_s = retry_after_s


def retry_after_s(value: str | None) -> float | None:
    """The seconds of a `Retry-After` header given in seconds (RFC 9110); None for none, or for the
    HTTP-date form (the caller's own backoff applies then)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


class PageReads(Protocol):
    """How a reader of settlements reads one page: `read()`, once or (after a `SettlementsBusy`)
    again, as the caller decides."""

    async def __call__(self, read: Callable[[], Awaitable[T]]) -> T: ...


async def ask_once(read: Callable[[], Awaitable[T]]) -> T:
    """Each page asked for once: a `SettlementsBusy` goes to the reader's caller."""
    return await read()


class SettledKind(enum.Enum):
    PAYMENT = "PAYMENT"
    REFUND = "REFUND"
    CHARGEBACK = "CHARGEBACK"  # a dispute's withdrawal (negative) or its reversal (positive)
    FEE = "FEE"  # a fee not tied to one payment (a monthly fee, a payout fee)
    OTHER = "OTHER"  # an adjustment, a transfer: shown, never matched


@dataclass(frozen=True)
class SettledItem:
    """One movement of money the provider settled for the account."""

    item_id: str  # the provider's own id of this movement (Stripe `txn_...`, Mollie's payment or refund id)
    kind: SettledKind
    currency: str  # ISO 4217, upper case
    gross_minor: int  # signed: a payment positive, a refund or chargeback negative
    fee_minor: int  # what the provider kept for it (a cost: positive; a fee refunded: negative)
    net_minor: int  # gross_minor - fee_minor
    settled_on: date  # the UTC day the money became the account's (Stripe `available_on`)
    payment_reference: str | None  # the payment it belongs to, as payorch stores it (see above)
    refund_reference: str | None  # for a refund: the provider's refund id
    payout_id: str | None  # the payout that carried it, when known
    method: str | None  # payorch's payment method name, when the provider says it
    created_at: datetime | None  # when the provider made the movement, when it says so


@dataclass(frozen=True)
class Payout:
    """Money the provider sent to the merchant's bank: `amount_minor` should equal the nets of the
    items it carried."""

    payout_id: str
    currency: str
    amount_minor: int
    arrives_on: date
    status: str  # the provider's own word for it (Stripe `paid`, `pending`...)


@runtime_checkable
class ReportsSettlements(Protocol):
    """A provider whose API says what it settled for an account."""

    # Days after a payment within which the provider may not have settled it yet: an item payorch
    # recorded that is missing at the provider is `expected` while younger than this.
    settlement_lag_days: int

    def settled_items(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """Every item settled on the UTC days `first` to `last` (both included), page by page."""
        ...

    def payouts(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[Payout]:
        """Every payout arriving on the UTC days `first` to `last`, page by page."""
        ...


@runtime_checkable
class ListsPayoutItems(Protocol):
    """A `ReportsSettlements` provider that can say which items one payout carried (Stripe:
    balance transactions by payout; Mollie: a settlement's payments, refunds and chargebacks), so
    that reconciliation checks the payout's amount against its items' nets."""

    def payout_items(
        self, credentials: Credentials, payout: Payout, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """Every item `payout` carried, each with its `payout_id`, page by page."""
        ...
