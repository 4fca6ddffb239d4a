"""Money: `Decimal` amounts in major units in the API, integer minor units in storage.

A currency's minor-unit exponent (JPY 0, USD 2, KWD 3) comes from Babel's copy of the CLDR currency
data rather than from a hand-typed table, except for the few currencies where CLDR's digits (how
amounts are usually written) differ from the ISO 4217 minor unit: those are listed below.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Context, Decimal

from babel.numbers import get_currency_precision, is_currency


class UnknownCurrency(ValueError):
    """Not an ISO 4217 alphabetic currency code."""


class TooManyDecimals(ValueError):
    """The amount has more decimals than its currency's minor unit allows."""


# ISO 4217 minor units where CLDR records fewer digits (CLDR says how amounts are usually shown).
_ISO_EXPONENT_WHERE_CLDR_DIFFERS = {
    "AFN": 2,
    "ALL": 2,
    "IQD": 3,
    "IRR": 2,
    "KPW": 2,
    "LAK": 2,
    "LBP": 2,
    "MGA": 2,
    "MMK": 2,
    "RSD": 2,
    "SOS": 2,
    "SYP": 2,
    "YER": 2,
}


def currency_exponent(currency: str) -> int:
    """The ISO 4217 minor-unit exponent of `currency`; `UnknownCurrency` for anything else."""
    if len(currency) != 3 or not currency.isalpha() or not currency.isupper() or not is_currency(currency):
        raise UnknownCurrency(f"{currency!r} is not an ISO 4217 currency code")
    if currency in _ISO_EXPONENT_WHERE_CLDR_DIFFERS:
        return _ISO_EXPONENT_WHERE_CLDR_DIFFERS[currency]
    return int(get_currency_precision(currency))


def to_minor_units(amount: Decimal, currency: str) -> int:
    """`amount` (major units) as an exact integer count of the currency's minor units."""
    exponent = currency_exponent(currency)
    # Enough precision for every digit of `amount`: the default 28 would round 1.000...0001 to 1.
    scaled = amount.scaleb(exponent, Context(prec=len(amount.as_tuple().digits) + 1))
    if scaled != scaled.to_integral_value():
        raise TooManyDecimals(f"{currency} amounts have at most {exponent} decimal places")
    return int(scaled)


def to_major_units(minor: int, currency: str) -> Decimal:
    """The major-unit `Decimal` of `minor` units, with exactly the currency's decimal places."""
    exponent = currency_exponent(currency)
    return Decimal(minor).scaleb(-exponent).quantize(Decimal(1).scaleb(-exponent))


@dataclass(frozen=True, order=True)
class Money:
    """An exact amount: integer minor units of an ISO 4217 currency."""

    minor: int
    currency: str

    @classmethod
    def from_major(cls, amount: Decimal, currency: str) -> Money:
        """Parse a major-unit amount; `UnknownCurrency` or `TooManyDecimals` when it cannot be exact."""
        return cls(to_minor_units(amount, currency), currency)

    @property
    def major(self) -> Decimal:
        return to_major_units(self.minor, self.currency)
