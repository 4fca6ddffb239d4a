"""What payorch offers on Mollie, and amounts as Mollie writes them.

Mollie's amounts are objects, `{"currency": "PLN", "value": "100.00"}`, the value a string with
exactly the currency's decimals (https://docs.mollie.com/reference/create-payment, `amount`): two for
most currencies, none for JPY and ISK. For every currency below Mollie's decimals are ISO 4217's,
which payorch stores, so the value is the exact major-unit amount, never rounded.

Methods (payorch's name -> Mollie's `method`): `card` -> `creditcard`, `apple_pay` -> `applepay`
(both in the currencies of Mollie's multicurrency list), `blik` -> `blik` (PLN only).

Accepted amounts, inclusive: from one minor unit (Mollie's API floor, 0.01) up to 999,999.99 for
cards and Apple Pay (JPY/ISK: 999,999), and up to 50,000.00 PLN for BLIK (the scheme's ceiling for
one payment, https://docs.mollie.com/docs/blik). An account's own maximum per method (set by
Mollie, shown in its dashboard and Methods API) can be lower: Mollie then answers 422 and routing
counts it as a failure of Mollie and cascades.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from payorch.providers.base import Limits, ProviderError
from payorch.values.money import Money, currency_exponent

# payorch's payment method -> Mollie's `method` parameter.
MOLLIE_METHODS: Final[Mapping[str, str]] = {"card": "creditcard", "apple_pay": "applepay", "blik": "blik"}
PAYMENT_METHODS: Final = frozenset(MOLLIE_METHODS)
# The currencies Mollie settles card payments in (its multicurrency list).
CARD_CURRENCIES: Final = frozenset(
    "AED AUD BGN CAD CHF CZK DKK EUR GBP HKD HUF ILS ISK JPY MXN MYR NOK NZD PHP PLN RON SEK SGD "  # noqa: SIM905
    "USD ZAR".split()
)
CARD_MAX_MAJOR: Final = 1_000_000  # exclusive: the largest amount is one minor unit less
BLIK_LIMITS: Final = Limits(min_minor=1, max_minor=5_000_000)  # 0.01 to 50,000.00 PLN


def mollie_limits(currency: str, payment_method: str) -> Limits | None:
    """The amounts payorch sends to Mollie for `payment_method` in `currency`, in minor units; None
    for a method or currency it does not offer on Mollie."""
    if payment_method == "blik":
        return BLIK_LIMITS if currency == "PLN" else None
    if payment_method not in PAYMENT_METHODS or currency not in CARD_CURRENCIES:
        return None
    return Limits(min_minor=1, max_minor=CARD_MAX_MAJOR * 10 ** currency_exponent(currency) - 1)


def to_mollie_amount(amount: Money) -> dict[str, str]:
    """`amount` as Mollie's amount object; `ProviderError` for a currency Mollie does not take."""
    if amount.currency not in CARD_CURRENCIES:
        raise ProviderError(f"Mollie does not take {amount.currency}")
    return {"currency": amount.currency, "value": format(amount.major, "f")}
