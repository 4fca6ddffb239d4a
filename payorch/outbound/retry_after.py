"""A receiver's `Retry-After`, read as RFC 9110 (section 10.2.3) defines it, and nothing else.

    Retry-After   = HTTP-date / delay-seconds
    delay-seconds = 1*DIGIT                      ; ASCII digits only
    HTTP-date     = IMF-fixdate / obs-date       ; section 5.6.7: recipients accept all three forms

    IMF-fixdate   Sun, 06 Nov 1994 08:49:37 GMT
    rfc850-date   Sunday, 06-Nov-94 08:49:37 GMT
    asctime-date  Sun Nov  6 08:49:37 1994

Anything else (a sign, a fraction, non-ASCII digits such as `²`, a date that does not exist) is no
`Retry-After` at all: the retry schedule alone decides. Pure functions: the caller passes the clock.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# More digits than this are more seconds than any schedule waits: no need to read them as a number
# (and Python refuses to convert a decimal string of over 4300 digits).
_MAX_DELAY_DIGITS = 12
_FOREVER_S = float(10**_MAX_DELAY_DIGITS)

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1
    )
}
_DAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = "(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = "(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = "(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_IMF_FIXDATE = re.compile(rf"{_DAY}, (?P<day>[0-9]{{2}}) {_MONTH} (?P<year>[0-9]{{4}}) {_TIME} GMT", re.ASCII)
_RFC850_DATE = re.compile(
    rf"{_LONG_DAY}, (?P<day>[0-9]{{2}})-{_MONTH}-(?P<year>[0-9]{{2}}) {_TIME} GMT", re.ASCII
)
_ASCTIME_DATE = re.compile(rf"{_DAY} {_MONTH} (?P<day>[ 0-9][0-9]) {_TIME} (?P<year>[0-9]{{4}})", re.ASCII)
_DELAY_SECONDS = re.compile("[0-9]+", re.ASCII)


def retry_after_s(value: str, now: datetime) -> float | None:
    """Seconds from `now` (aware) that a `Retry-After` field value asks a client to wait, or None
    when `value` is neither delay-seconds nor an HTTP-date. A date in the past is 0. The result is
    not bounded: an absurdly long wait comes back as it was asked (the caller bounds it), at most
    10**12 s."""
    value = value.strip(" \t")
    if _DELAY_SECONDS.fullmatch(value):
        return _FOREVER_S if len(value) > _MAX_DELAY_DIGITS else float(int(value))
    at = http_date(value, now)
    if at is None:
        return None
    return max((at - now).total_seconds(), 0.0)


def http_date(value: str, now: datetime) -> datetime | None:
    """The instant an HTTP-date names (UTC), or None when `value` is none of its three forms or names
    no real date. An rfc850-date's two-digit year is the year nearest `now` that is not more than
    50 years in the future, as RFC 9110 asks."""
    for form in (_IMF_FIXDATE, _RFC850_DATE, _ASCTIME_DATE):
        match = form.fullmatch(value)
        if match is None:
            continue
        year = int(match["year"])
        if form is _RFC850_DATE:
            year += now.year - now.year % 100
            if year > now.year + 50:
                year -= 100
        try:
            return datetime(
                year,
                _MONTHS[match["month"]],
                int(match["day"]),
                int(match["hour"]),
                int(match["minute"]),
                int(match["second"]),
                tzinfo=UTC,
            )
        except ValueError:  # 31 Feb, 25:00:00, a leap second: no such instant
            return None
    return None
