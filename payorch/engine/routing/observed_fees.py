"""The fees reconciliation observed, in routing's terms (docs/reconciliation.md, "Observed fees").

Pure code. A provider's observed fee for a payment method and currency is its matched payments'
fees over their gross, over the window (`reconciliation.fee_window_days`): the mean rate the
provider really kept of each unit of money, as a `Fee` of that `percent` (4 decimals, half up;
never below 0) and no fixed part. A fixed part of the provider's is folded into that rate at the
payments' own mix of amounts, so it is exact for the volume as a whole, not for one amount.

`fee_in_force` is the fee `net` routing weighs: the routing document's for the provider (its
method's own, else its own) whenever the document gives the provider one, else the observed one
for the payment's method and currency, else none.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from typing import Literal, NamedTuple

from payorch.engine.routing.document import Fee, RoutingDocument
from payorch.storage.observed_fees import FeeSums

FeeSource = Literal["document", "observed"]
_PERCENT_PLACES = Decimal("0.0001")


class ObservedFee(FeeSums):
    """What a provider kept of its matched payments in one payment method and currency over the
    window (`FeeSums`: `payments` of them, `gross_minor` paid, `fee_minor` kept, in minor units),
    and the fee that makes in routing's terms."""

    @functools.cached_property
    def percent(self) -> Decimal:
        """The mean rate, in percent of the gross: 100 x fees / gross, 4 decimals, at least 0."""
        rate = Decimal(max(self.fee_minor, 0)) * 100 / Decimal(self.gross_minor)
        return rate.quantize(_PERCENT_PLACES, rounding=ROUND_HALF_UP)

    @functools.cached_property
    def fee(self) -> Fee:
        """The observed fee as routing weighs a fee: `percent` of the amount, nothing fixed."""
        return Fee(percent=self.percent)


class ObservedFees:
    """An application's observed fees, by provider, payment method and currency."""

    def __init__(self, observed: Iterable[ObservedFee]) -> None:
        self._by_segment = {(fee.provider, fee.payment_method, fee.currency): fee for fee in observed}

    def of(self, provider: str, payment_method: str, currency: str) -> ObservedFee | None:
        """The provider's observed fee for payments in `payment_method` and `currency`, if any."""
        return self._by_segment.get((provider, payment_method, currency))

    def __iter__(self) -> Iterator[ObservedFee]:
        """Every observed fee, by provider, payment method and currency."""
        return iter(self._by_segment[key] for key in sorted(self._by_segment))


NO_OBSERVED_FEES = ObservedFees(())


class FeeInForce(NamedTuple):
    """The fee `net` routing weighs for a provider, and where it comes from."""

    fee: Fee
    source: FeeSource


def fee_in_force(
    document: RoutingDocument, observed: ObservedFees, provider: str, payment_method: str, currency: str
) -> FeeInForce | None:
    """The document's fee of `provider` for `payment_method` when the document gives the provider
    a fee; else the fee observed for its payments in that method and currency; else None."""
    fee = document.fee_of(provider, payment_method)
    if fee is not None:
        return FeeInForce(fee, "document")
    seen = observed.of(provider, payment_method, currency)
    return None if seen is None else FeeInForce(seen.fee, "observed")
