"""What payorch offers on Stripe, and amounts in Stripe's minor units.

Accepted amounts (Stripe's "minimum and maximum charge amounts",
https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts), inclusive:
- `card` and `apple_pay` (Apple Pay is a card wallet on Stripe Checkout): the currencies of Stripe's
  minimum-charge table (`MINIMUM_CHARGE`), from that minimum up to 99,999,999 minor units (Stripe
  takes at most eight digits);
- `blik`: PLN only (https://docs.stripe.com/payments/blik/accept-a-payment), 2.00 PLN to
  50,000.00 PLN (the BLIK scheme's ceiling for one payment).

For every one of these currencies Stripe's minor unit is the ISO 4217 one payorch stores (JPY has
none, the others two), so amounts pass unchanged; `to_stripe_amount` holds the general rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from payorch.providers.base import Limits, ProviderError
from payorch.values.money import Money, currency_exponent

PAYMENT_METHODS: Final = frozenset({"card", "apple_pay", "blik"})
# Stripe's zero-decimal currencies (https://docs.stripe.com/currencies#zero-decimal).
ZERO_DECIMAL: Final = frozenset(
    {
        "BIF",
        "CLP",
        "DJF",
        "GNF",
        "JPY",
        "KMF",
        "KRW",
        "MGA",
        "PYG",
        "RWF",
        "UGX",
        "VND",
        "VUV",
        "XAF",
        "XOF",
        "XPF",
    }
)
# Stripe's minimum charge per currency, in its minor units. A currency missing here has no documented
# minimum of its own (Stripe converts it to the settlement currency's), so payorch does not offer it.
MINIMUM_CHARGE: Final[Mapping[str, int]] = {
    "AED": 200,
    "AUD": 50,
    "BGN": 100,
    "BRL": 50,
    "CAD": 50,
    "CHF": 50,
    "CZK": 1500,
    "DKK": 250,
    "EUR": 50,
    "GBP": 30,
    "HKD": 400,
    "HUF": 17500,
    "INR": 50,
    "JPY": 50,
    "MXN": 1000,
    "MYR": 200,
    "NOK": 300,
    "NZD": 50,
    "PLN": 200,
    "RON": 200,
    "SEK": 300,
    "SGD": 50,
    "THB": 1000,
    "USD": 50,
}
MAXIMUM_CHARGE: Final = 99_999_999  # "up to eight digits"
BLIK_MAXIMUM: Final = 5_000_000  # 50,000.00 PLN


def stripe_limits(currency: str, payment_method: str) -> Limits | None:
    """The amounts payorch sends to Stripe for `payment_method` in `currency`, in payorch's minor
    units; None for a method or currency it does not offer on Stripe."""
    minimum = MINIMUM_CHARGE.get(currency)
    if payment_method not in PAYMENT_METHODS or minimum is None:
        return None
    if payment_method == "blik":
        return Limits(min_minor=minimum, max_minor=BLIK_MAXIMUM) if currency == "PLN" else None
    return Limits(min_minor=minimum, max_minor=MAXIMUM_CHARGE)


def stripe_exponent(currency: str) -> int:
    """Decimals of Stripe's amounts in `currency`: none for its zero-decimal currencies, two for ISK
    (whole krónur, written with two decimals), otherwise the ISO 4217 exponent."""
    if currency in ZERO_DECIMAL:
        return 0
    if currency == "ISK":
        return 2
    return currency_exponent(currency)


def to_stripe_amount(amount: Money) -> int:
    """`amount` in Stripe's minor units; `ProviderError` when Stripe cannot express it exactly."""
    shift = stripe_exponent(amount.currency) - currency_exponent(amount.currency)
    if shift >= 0:
        return amount.minor * int(10**shift)
    whole, rest = divmod(amount.minor, int(10**-shift))
    if rest:
        raise ProviderError(f"Stripe takes whole {amount.currency} amounts only")
    return whole
