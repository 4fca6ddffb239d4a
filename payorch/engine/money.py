"""Money: `Decimal` amounts in major units in the API, integer minor units in storage.

A currency's minor-unit exponent (JPY 0, USD 2, KWD 3) comes from Babel's copy of the CLDR currency
data, which tracks ISO 4217, rather than from a hand-typed table.
"""

from __future__ import annotations

from decimal import Decimal

from babel.numbers import get_currency_precision, is_currency


class UnknownCurrency(ValueError):
    """Not an ISO 4217 alphabetic currency code."""


class TooManyDecimals(ValueError):
    """The amount has more decimals than its currency's minor unit allows."""


def currency_exponent(currency: str) -> int:
    if len(currency) != 3 or not currency.isalpha() or not currency.isupper() or not is_currency(currency):
        raise UnknownCurrency(f"{currency!r} is not an ISO 4217 currency code")
    return int(get_currency_precision(currency))


def to_minor_units(amount: Decimal, currency: str) -> int:
    """`amount` (major units) as an exact integer count of the currency's minor units."""
    exponent = currency_exponent(currency)
    scaled = amount.scaleb(exponent)
    if scaled != scaled.to_integral_value():
        raise TooManyDecimals(f"{currency} amounts have at most {exponent} decimal places")
    return int(scaled)


def to_major_units(minor: int, currency: str) -> Decimal:
    """The major-unit `Decimal` of `minor` units, with exactly the currency's decimal places."""
    exponent = currency_exponent(currency)
    return Decimal(minor).scaleb(-exponent).quantize(Decimal(1).scaleb(-exponent))
