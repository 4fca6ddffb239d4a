"""`Retry-After` is read as RFC 9110 defines it: ASCII delay-seconds or one of the three HTTP-date
forms; anything else is no `Retry-After` at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from payorch.outbound.retry_after import http_date, retry_after_s

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("1", 1.0), ("120", 120.0), (" 30\t", 30.0)])
def test_delay_seconds_are_ascii_digits(value: str, seconds: float) -> None:
    assert retry_after_s(value, NOW) == seconds


def test_a_delay_of_more_digits_than_any_schedule_needs_is_very_long_not_an_error() -> None:
    assert retry_after_s("99999999999999999", NOW) == 1e12
    assert retry_after_s("9" * 5000, NOW) == 1e12  # beyond what int() converts from text


@pytest.mark.parametrize(
    "value",
    [
        "²",
        "١٢",
        "\uff11\uff12",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "",
        " ",
        "5 s",
        "0x10",
        "soon",
        "\x00",
        "Sun, 06 Nov 1994",
    ],
)
def test_anything_but_digits_or_an_http_date_is_ignored(value: str) -> None:
    assert retry_after_s(value, NOW) is None


@pytest.mark.parametrize(
    "value",
    [
        "Sat, 01 Mar 2025 12:01:30 GMT",  # IMF-fixdate
        "Saturday, 01-Mar-25 12:01:30 GMT",  # obsolete RFC 850 form
        "Sat Mar  1 12:01:30 2025",  # ANSI C asctime() form
    ],
)
def test_each_http_date_form_is_the_wait_until_that_instant(value: str) -> None:
    assert retry_after_s(value, NOW) == 90.0


def test_an_http_date_in_the_past_asks_for_no_wait() -> None:
    assert retry_after_s("Sun, 06 Nov 1994 08:49:37 GMT", NOW) == 0.0


def test_an_rfc850_year_more_than_50_years_ahead_is_the_last_century() -> None:
    assert http_date("Sunday, 06-Nov-94 08:49:37 GMT", NOW) == datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)
    assert http_date("Monday, 06-Nov-34 08:49:37 GMT", NOW) == datetime(2034, 11, 6, 8, 49, 37, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "Sat, 31 Feb 2025 12:00:00 GMT",  # no such day
        "Sat, 01 Mar 2025 25:00:00 GMT",  # no such hour
        "Sat, 01 Mar 2025 12:00:00 UTC",  # HTTP-dates are GMT
        "sat, 01 mar 2025 12:00:00 gmt",  # names are case-sensitive
        "Sat, 1 Mar 2025 12:00:00 GMT",  # two-digit day
        "Sat, \uff101 Mar 2025 12:00:00 GMT",  # fullwidth digit
    ],
)
def test_a_malformed_or_impossible_date_is_ignored(value: str) -> None:
    assert retry_after_s(value, NOW) is None


def test_a_far_future_date_is_returned_as_asked_for_the_caller_to_bound() -> None:
    assert retry_after_s("Fri, 31 Dec 9999 23:59:59 GMT", NOW) == (
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - NOW
    ) / timedelta(seconds=1)
