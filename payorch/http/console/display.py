"""How the console writes the values it shows: times people read at a glance, and readable labels
for statuses and payment methods, the exact value a hover away.

    {{ moment | console_time }}   <time datetime="2026-11-25T20:14:05.123Z" title="(the same)">
                                  25 Nov 2026, 20:14 UTC</time>
    {{ status | label }}          Partially refunded (text, for an <option> or a sentence)
    {{ status | labelled }}       <span title="PARTIALLY_REFUNDED">Partially refunded</span>

A time is written in UTC by the server; the console's script rewrites it in the browser's own time
zone (its `datetime` attribute says the moment exactly), so a page read without the script still
says which time it is. The API's values themselves (`PARTIALLY_REFUNDED`, `apple_pay`, ISO 8601)
stay in `datetime` and `title`, for whoever compares them with the API's answers.
"""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup

from payorch.http.console.kit import blueprint
from payorch.values.timefmt import iso

# The words the general rule (underscores to spaces, first letter capital) gets wrong: brands and
# abbreviations. The one place a value's label is written.
LABELS = {
    "apple_pay": "Apple Pay",
    "blik": "BLIK",
    "google_pay": "Google Pay",
    "pay_by_link": "Pay by link",
}


def label(value: object) -> str:
    """`value` (a status, a payment method, a failure reason...) as a person reads it:
    `PARTIALLY_REFUNDED` is "Partially refunded", `card` "Card", `apple_pay` "Apple Pay"."""
    text = str(value)
    if text in LABELS:
        return LABELS[text]
    words = text.replace("_", " ").strip()
    return words[:1].upper() + words[1:].lower()


@blueprint.app_template_filter("label")
def _label(value: object) -> str:
    return label(value)


@blueprint.app_template_filter("labelled")
def labelled(value: object) -> Markup:
    """`label(value)`, with the value itself on hover."""
    return Markup('<span title="{}">{}</span>').format(str(value), label(value))


# Not `%b`, which follows the process's locale.
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def moment_of(value: datetime | str) -> datetime:
    """A time the console shows: a `datetime`, or the API's ISO 8601 text of one (`...Z`)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def readable_time(value: datetime | str) -> str:
    """The moment in UTC to the minute, day first: `25 Nov 2026, 20:14 UTC`."""
    moment = moment_of(value).astimezone(UTC)
    return f"{moment.day} {MONTHS[moment.month - 1]} {moment.year}, {moment:%H:%M} UTC"


@blueprint.app_template_filter("console_time")
def console_time(value: datetime | str | None) -> Markup:
    """A `<time>` element: `readable_time` as its text, the exact ISO 8601 time (the API's) as its
    `datetime` and its `title`. Nothing for None."""
    if value is None:
        return Markup("")
    exact = iso(moment_of(value))
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(exact, readable_time(value))
