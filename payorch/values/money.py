"""Money: `Decimal` amounts in major units in the API, integer minor units in storage.

A currency's minor-unit exponent (JPY 0, USD 2, KWD 3) comes from Babel's copy of the CLDR currency
data rather than from a hand-typed table, except for the few currencies where CLDR's digits (how
amounts are usually written) differ from the ISO 4217 minor unit: those are listed below.

Conversions are exact or refused: an amount is never rounded to fit its currency.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal

from babel.numbers import get_currency_precision, is_currency, list_currencies


class UnknownCurrency(ValueError):
    """Not the ISO 4217 code of a currency: unknown, or one of the X-codes that name no currency
    (precious metals, testing, funds and units of account, "no currency")."""


class TooManyDecimals(ValueError):
    """The amount has more decimals than its currency's minor unit allows."""


class AmountOutOfRange(ValueError):
    """The amount has more digits than any payment could (no caller should get this far)."""


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

# ISO 4217 gives the X- prefix to codes of no single country. Only these few are currencies people
# pay with; the other X-codes name precious metals (XAU, XAG, XPT, XPD), bond-market and fund units
# (XBA..XBD, XDR, XSU, XUA), the testing code XTS, "no currency" XXX, and withdrawn units (XEU, XFO,
# XFU, XRE). Money in them cannot be charged or refunded.
_X_CODES_THAT_ARE_CURRENCIES = frozenset(
    {
        "XAF",  # Central African CFA franc
        "XCD",  # East Caribbean dollar
        "XCG",  # Caribbean guilder (Curaçao and Sint Maarten, since 2025)
        "XOF",  # West African CFA franc
        "XPF",  # CFP franc
    }
)

# ISO 4217's fund codes and units of account outside the X- range: each names an accounting unit
# (an inflation-indexed unit, a same-day or next-day dollar, a bank's settlement unit) beside a
# country's currency, never money a customer pays with. Babel knows them as currencies: refused here.
_FUNDS_AND_UNITS_OF_ACCOUNT = frozenset(
    {
        "BOV",  # Bolivian Mvdol
        "CHE",  # WIR euro
        "CHW",  # WIR franc
        "CLF",  # Chilean Unidad de Fomento
        "COU",  # Colombian Unidad de Valor Real
        "MXV",  # Mexican Unidad de Inversion
        "USN",  # US dollar, next day
        "UYI",  # Uruguay peso en unidades indexadas
        "UYW",  # Uruguayan Unidad Previsional
    }
)

# More minor-unit digits than any amount could have: a bound on the integers built below, so that
# an exponent like 1E+999999999 is refused instead of building a gigantic number.
_MAX_MINOR_DIGITS = 64


@functools.lru_cache(maxsize=512)
def _iso_exponent(currency: str) -> int:
    """The minor-unit exponent of any ISO 4217 code CLDR knows, currencies or not."""
    if len(currency) != 3 or not currency.isalpha() or not currency.isupper() or not is_currency(currency):
        raise UnknownCurrency(f"{currency!r} is not an ISO 4217 currency code")
    if currency in _ISO_EXPONENT_WHERE_CLDR_DIFFERS:
        return _ISO_EXPONENT_WHERE_CLDR_DIFFERS[currency]
    return int(get_currency_precision(currency))


def currency_exponent(currency: str) -> int:
    """The ISO 4217 minor-unit exponent of `currency`; `UnknownCurrency` for anything that is not
    the code of a currency, X-codes for metals, funds, testing and "no currency" included."""
    exponent = _iso_exponent(currency)
    if currency in _FUNDS_AND_UNITS_OF_ACCOUNT or (
        currency.startswith("X") and currency not in _X_CODES_THAT_ARE_CURRENCIES
    ):
        raise UnknownCurrency(
            f"{currency!r} is an ISO 4217 code for something other than a currency "
            "(a precious metal, a fund or unit of account, testing, or no currency)"
        )
    return exponent


@functools.cache
def known_currencies() -> tuple[str, ...]:
    """Every code `currency_exponent` accepts, sorted: the currencies an amount may be in (the
    OpenAPI document lists them)."""
    known = []
    for code in sorted(list_currencies()):
        try:
            currency_exponent(code)
        except UnknownCurrency:
            continue
        known.append(code)
    return tuple(known)


@functools.cache
def smallest_minor_unit() -> Decimal:
    """The smallest minor unit of any known currency (0.001: KWD, BHD and the other 3-decimal
    currencies): every valid amount, whatever its currency, is a multiple of it."""
    return Decimal(1).scaleb(-max(currency_exponent(code) for code in known_currencies()))


def to_minor_units(amount: Decimal, currency: str) -> int:
    """`amount` (major units) as an exact integer count of the currency's minor units.

    Nothing is rounded: `TooManyDecimals` when the amount has a non-zero digit below the currency's
    minor unit, however far below (`1E-999999999` included); `UnknownCurrency` as
    `currency_exponent`; `AmountOutOfRange` for more than 64 digits of minor units."""
    exponent = currency_exponent(currency)
    sign, digits, power = amount.as_tuple()
    if not isinstance(power, int):
        raise AmountOutOfRange(f"{amount} is not a finite amount")
    # Integer arithmetic on the coefficient and the exponent: Decimal arithmetic would go through a
    # context whose precision and exponent range (Emin) can round the amount, even to zero.
    coefficient = "".join(map(str, digits)).lstrip("0")
    if not coefficient:
        return 0
    significant = coefficient.rstrip("0")  # trailing zeros (10.50) do not make an amount inexact
    shift = power + (len(coefficient) - len(significant)) + exponent
    if shift < 0:
        raise TooManyDecimals(f"{currency} amounts have at most {exponent} decimal places")
    if len(significant) + shift > _MAX_MINOR_DIGITS:
        raise AmountOutOfRange(f"{amount} {currency} is out of range")
    minor = int(significant + "0" * shift)
    return -minor if sign else minor


def to_major_units(minor: int, currency: str) -> Decimal:
    """The major-unit `Decimal` of `minor` units, with exactly the currency's decimal places.

    Accepts any ISO 4217 code, also those `currency_exponent` refuses: it shows what was stored."""
    exponent = _iso_exponent(currency)
    return Decimal(minor).scaleb(-exponent).quantize(Decimal(1).scaleb(-exponent))


@dataclass(frozen=True, order=True)
class Money:
    """An exact amount: integer minor units of an ISO 4217 currency."""

    minor: int
    currency: str

    @classmethod
    def from_major(cls, amount: Decimal, currency: str) -> Money:
        """Parse a major-unit amount exactly; the errors of `to_minor_units` when it cannot be exact."""
        return cls(to_minor_units(amount, currency), currency)

    @property
    def major(self) -> Decimal:
        return to_major_units(self.minor, self.currency)
