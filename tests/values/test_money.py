"""Money: major-unit `Decimal` amounts to integer minor units and back, and JSON that keeps them exact."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from quart import jsonify, request

from payorch.http.jsonio import ExactJsonProvider, dumps_exact, loads_exact
from payorch.http.services import PayorchApp
from payorch.values.money import (
    AmountOutOfRange,
    TooManyDecimals,
    UnknownCurrency,
    currency_exponent,
    to_major_units,
    to_minor_units,
)

# --- minor units ----------------------------------------------------------------------------------


def test_usd_amount_is_counted_in_cents() -> None:
    assert to_minor_units(Decimal("10.50"), "USD") == 1050


def test_usd_amount_with_one_decimal_is_counted_in_cents() -> None:
    assert to_minor_units(Decimal("10.5"), "USD") == 1050


def test_jpy_amount_has_no_minor_unit() -> None:
    assert to_minor_units(Decimal("1000"), "JPY") == 1000


def test_jpy_amount_with_a_fraction_is_too_many_decimals() -> None:
    with pytest.raises(TooManyDecimals):
        to_minor_units(Decimal("10.5"), "JPY")


def test_kwd_amount_is_counted_in_fils() -> None:
    assert to_minor_units(Decimal("1.234"), "KWD") == 1234


def test_usd_amount_below_a_cent_is_too_many_decimals() -> None:
    with pytest.raises(TooManyDecimals):
        to_minor_units(Decimal("0.001"), "USD")


def test_digit_beyond_the_default_decimal_precision_is_too_many_decimals() -> None:
    # 32 significant digits: Python's default context (28) would round the last one away.
    with pytest.raises(TooManyDecimals):
        to_minor_units(Decimal("1.0000000000000000000000000000001"), "USD")


def test_long_amount_is_converted_without_rounding() -> None:
    assert to_minor_units(Decimal("12345678901234567890123456789012.34"), "USD") == (
        1234567890123456789012345678901234
    )


def test_amount_in_exponent_notation_is_converted() -> None:
    assert to_minor_units(Decimal("1E+3"), "JPY") == 1000


def test_amount_far_below_the_minor_unit_is_too_many_decimals_not_zero() -> None:
    # Decimal arithmetic in a context with an exponent floor would round this to 0 cents.
    with pytest.raises(TooManyDecimals):
        to_minor_units(Decimal("1E-999999999"), "USD")


def test_amount_far_above_any_payment_is_out_of_range() -> None:
    with pytest.raises(AmountOutOfRange):
        to_minor_units(Decimal("1E+999999999"), "USD")


@pytest.mark.parametrize(("amount", "minor"), [("10.500000", 1050), ("1.00E+2", 10000), ("-1.25", -125)])
def test_exact_amount_in_any_spelling_is_converted(amount: str, minor: int) -> None:
    assert to_minor_units(Decimal(amount), "USD") == minor


def test_zero_with_a_deep_exponent_is_zero() -> None:
    assert to_minor_units(Decimal("0E-999999999"), "USD") == 0


@pytest.mark.parametrize(
    "code",
    ["XXX", "XTS", "XAU", "XAG", "XPT", "XPD", "XDR", "XBA", "XBB", "XBC", "XBD", "XSU", "XUA", "XEU", "XFU"],
)
def test_x_code_that_names_no_currency_is_unknown(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        currency_exponent(code)


@pytest.mark.parametrize("code", ["BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "UYI", "UYW"])
def test_a_fund_code_or_unit_of_account_is_not_a_currency(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        currency_exponent(code)


@pytest.mark.parametrize(("code", "exponent"), [("XAF", 0), ("XOF", 0), ("XPF", 0), ("XCD", 2), ("XCG", 2)])
def test_x_code_that_is_a_currency_is_accepted(code: str, exponent: int) -> None:
    assert currency_exponent(code) == exponent


def test_amount_stored_in_a_code_now_refused_can_still_be_shown() -> None:
    assert str(to_major_units(1050, "XTS")) == "10.50"
    assert str(to_major_units(10500, "CLF")) == "1.0500"  # ISO 4217's four decimals


@pytest.mark.parametrize("code", ["ABC", "usd", "US", "USDX", "U$D", ""])
def test_unknown_currency_code_is_refused(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        to_minor_units(Decimal("1"), code)


@pytest.mark.parametrize(
    ("currency", "exponent"),
    [("USD", 2), ("EUR", 2), ("JPY", 0), ("KRW", 0), ("KWD", 3), ("BHD", 3), ("ISK", 0)],
)
def test_currency_exponent_is_the_iso_4217_minor_unit(currency: str, exponent: int) -> None:
    assert currency_exponent(currency) == exponent


@pytest.mark.parametrize(("currency", "exponent"), [("IQD", 3), ("RSD", 2), ("MGA", 2), ("LBP", 2)])
def test_iso_4217_minor_unit_wins_where_cldr_shows_fewer_digits(currency: str, exponent: int) -> None:
    assert currency_exponent(currency) == exponent


# --- major units ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("minor", "currency", "shown"),
    [
        (1050, "USD", "10.50"),
        (1000, "USD", "10.00"),
        (1000, "JPY", "1000"),
        (1234, "KWD", "1.234"),
        (1, "USD", "0.01"),
    ],
)
def test_major_units_keep_exactly_the_currencys_decimals(minor: int, currency: str, shown: str) -> None:
    assert str(to_major_units(minor, currency)) == shown


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("10.50", "USD"), ("0.01", "USD"), ("1000", "JPY"), ("1.234", "KWD"), ("99999999.99", "EUR")],
)
def test_minor_and_major_units_round_trip(amount: str, currency: str) -> None:
    back = to_major_units(to_minor_units(Decimal(amount), currency), currency)
    assert back == Decimal(amount)
    assert str(back) == amount


def test_round_trip_pads_to_the_currencys_decimals() -> None:
    assert str(to_major_units(to_minor_units(Decimal("10.5"), "USD"), "USD")) == "10.50"


# --- JSON -----------------------------------------------------------------------------------------


def test_json_number_with_a_fraction_is_parsed_as_decimal() -> None:
    parsed = loads_exact('{"amount": 0.1}')
    assert parsed["amount"] == Decimal("0.1")
    assert isinstance(parsed["amount"], Decimal)


def test_json_integer_stays_an_integer() -> None:
    parsed = loads_exact('{"count": 3}')
    assert parsed["count"] == 3
    assert isinstance(parsed["count"], int)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_non_finite_number_is_refused(constant: str) -> None:
    with pytest.raises(ValueError, match="not a JSON number"):
        loads_exact(f'{{"amount": {constant}}}')


def test_decimal_is_written_as_a_json_number_without_float_rounding() -> None:
    assert dumps_exact({"amount": Decimal("12345678901234.57")}) == '{"amount": 12345678901234.57}'


def test_decimal_keeps_its_trailing_zeros_in_json() -> None:
    assert dumps_exact([Decimal("10.50")]) == "[10.50]"


def test_decimal_beyond_float_precision_is_written_exactly() -> None:
    assert dumps_exact([Decimal("0.1000000000000000000000000001")]) == "[0.1000000000000000000000000001]"


async def test_app_parses_request_amounts_as_decimal_and_writes_them_back_exactly(app: PayorchApp) -> None:
    seen: dict[str, Any] = {}

    @app.post("/test-only/echo")
    async def echo() -> Any:
        body = await request.get_json()
        seen["amount"] = body["amount"]
        return jsonify({"amount": body["amount"]})

    assert isinstance(app.json, ExactJsonProvider)
    response = await app.test_client().post(
        "/test-only/echo",
        data='{"amount": 12345678901234.5678901}',
        headers={"Content-Type": "application/json"},
    )
    assert seen["amount"] == Decimal("12345678901234.5678901")
    assert await response.get_data(as_text=True) == '{"amount": 12345678901234.5678901}'
