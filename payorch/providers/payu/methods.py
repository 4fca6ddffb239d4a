"""What payorch offers on PayU: its hosted page's methods, the currencies PayU settles, the amounts.

PayU takes amounts as strings of integer minor units (`totalAmount: "12345"` is 123.45 PLN); PayU's
minor units are ISO 4217's for every currency below, which payorch stores, so nothing is rounded.

Methods (payorch's name -> the `payMethods.payMethod` PayU preselects on its page, type `PBL`):
`blik` -> `blik` (PLN only), `card` -> `c`, `apple_pay` -> `jp`, `google_pay` -> `ap` (all three in
every currency below), `pay_by_link` -> none preselected: the customer picks their bank on PayU's
page (PLN: Polish banks; CZK: Czech banks).

Currencies: those PayU's REST API documents for a POS (BGN CHF CZK DKK EUR GBP HUF NOK PLN RON
SEK UAH USD); a POS settles only the currencies PayU enabled on it (PayU then answers 400 and
routing counts a failure of the account and cascades).

Accepted amounts, inclusive: from one minor unit up to 999,999.99 (PayU's `totalAmount` takes
more, merchants' agreements rarely do), and up to 50,000.00 PLN for BLIK (the scheme's ceiling for
one payment).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from payorch.providers.base import Limits
from payorch.values.money import currency_exponent

# payorch's payment method -> the PayU pay method code preselected on PayU's page (None: the page's
# own choice, within the method).
PAYU_METHODS: Final[Mapping[str, str | None]] = {
    "blik": "blik",
    "card": "c",
    "apple_pay": "jp",
    "google_pay": "ap",
    "pay_by_link": None,
}
PAYMENT_METHODS: Final = frozenset(PAYU_METHODS)
CURRENCIES: Final = frozenset("BGN CHF CZK DKK EUR GBP HUF NOK PLN RON SEK UAH USD".split())  # noqa: SIM905
PAY_BY_LINK_CURRENCIES: Final = frozenset({"PLN", "CZK"})
MAX_MAJOR: Final = 1_000_000  # exclusive: the largest amount is one minor unit less
BLIK_LIMITS: Final = Limits(min_minor=1, max_minor=5_000_000)  # 0.01 to 50,000.00 PLN


def payu_limits(currency: str, payment_method: str) -> Limits | None:
    """The amounts payorch sends to PayU for `payment_method` in `currency`, in minor units; None for
    a method or currency it does not offer on PayU."""
    if payment_method == "blik":
        return BLIK_LIMITS if currency == "PLN" else None
    if payment_method == "pay_by_link" and currency not in PAY_BY_LINK_CURRENCIES:
        return None
    if payment_method not in PAYMENT_METHODS or currency not in CURRENCIES:
        return None
    return Limits(min_minor=1, max_minor=MAX_MAJOR * 10 ** currency_exponent(currency) - 1)
