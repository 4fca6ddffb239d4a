"""The 30-day picture on the applications page: sessions per day by outcome, completed refunds per
day by currency, and the share of sessions recovery saved, for every application of the signed-in
merchant.

The window is the last 30 UTC days, today (by the service's clock) included. A session counts on
the day it was created, under the outcome its status has now (`OUTCOMES`); a refund counts on the
day it was made, once it is COMPLETED. Refunds in different currencies are never added together:
each currency has a line of its own, on a scale of its own, and a column of its own in the table.
A session recovered was declined (or given up) at its first attempt, sent on to another provider
by the application's recovery policy, and paid there (`storage.activity.Recovery`); the share is of
the window's sessions sent on so.

Drawn here as inline SVG (no chart library, nothing the Content-Security-Policy would refuse:
classes styled by `console.css`, no `style` attribute, no script), and given as a table too, since
a picture is not read by a screen reader. Amounts stay integer minor units until they are written
with their currency's exponent; coordinates are exact fractions rounded once, when written.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from fractions import Fraction

from markupsafe import Markup

from payorch.http.auth import Principal
from payorch.http.console.charts import svg_element as _element
from payorch.http.console.charts import svg_markup as _markup
from payorch.http.console.charts import svg_number as _coordinate
from payorch.http.services import services
from payorch.storage.activity import Activity, Recovery, merchant_activity
from payorch.values.money import to_major_units
from payorch.values.statuses import SessionStatus

DAYS = 30


@dataclass(frozen=True)
class Outcome:
    key: str  # the CSS class of its bars and swatch
    label: str
    statuses: frozenset[SessionStatus]


# Bottom to top in each bar. A refunded session was paid: its refunds are the other picture.
# A reversed one was paid and then lost to a dispute: the merchant did not keep the money.
OUTCOMES = (
    Outcome(
        "paid",
        "Paid",
        frozenset({SessionStatus.SUCCEEDED, SessionStatus.PARTIALLY_REFUNDED, SessionStatus.REFUNDED}),
    ),
    Outcome("pending", "Pending", frozenset({SessionStatus.PENDING})),
    Outcome("failed", "Failed or reversed", frozenset({SessionStatus.FAILED, SessionStatus.REVERSED})),
)
OUTCOME_OF = {status: outcome.key for outcome in OUTCOMES for status in outcome.statuses}
# More currencies than this are in the table only: a line each would make a tall picture.
MAX_REFUND_LINES = 4


@dataclass(frozen=True)
class Refunded:
    count: int = 0
    amount_minor: int = 0


@dataclass
class DayFigures:
    day: date
    sessions: dict[str, int]  # by outcome key; every outcome present
    refunds: dict[str, Refunded] = field(default_factory=dict)  # by currency, only those refunded

    @property
    def total_sessions(self) -> int:
        return sum(self.sessions.values())

    @property
    def refund_count(self) -> int:
        return sum(refunded.count for refunded in self.refunds.values())

    def refunded(self, currency: str) -> Refunded:
        return self.refunds.get(currency, Refunded())


@dataclass(frozen=True)
class ActivityChart:
    """What `console/activity.html` shows."""

    days: list[DayFigures]  # oldest first, one per day of the window, days without activity too
    currencies: list[str]  # of the completed refunds in the window, in code order
    totals: DayFigures  # the whole window (its `day` is the last)
    sessions_summary: str
    refunds_summary: str
    recovery_summary: str
    sessions_svg: Markup
    refunds_svg: Markup | None  # None without a completed refund in the window
    undrawn_currencies: list[str]  # refunded in the window, in the table only

    @property
    def first(self) -> date:
        return self.days[0].day

    @property
    def last(self) -> date:
        return self.days[-1].day

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return OUTCOMES

    def money(self, minor: int, currency: str) -> str:
        return money_text(minor, currency)


async def activity_of(principal: Principal) -> ActivityChart:
    """The picture of the principal's merchant's last 30 UTC days, today by the service's clock."""
    today = services().context.clock.now().astimezone(UTC).date()
    first = today - timedelta(days=DAYS - 1)
    activity = await services().context.db.snapshot(
        merchant_activity,
        principal.merchant_id,
        since=datetime.combine(first, time(), UTC),
        until=datetime.combine(today + timedelta(days=1), time(), UTC),
    )
    return activity_chart(activity, first)


def activity_chart(activity: Activity, first: date) -> ActivityChart:
    """The figures, summaries and drawings of the 30 days from `first` (rows outside are ignored)."""
    days = day_figures(activity, first)
    totals = window_totals(days)
    currencies = sorted(totals.refunds)
    # The lines drawn: those of the currencies refunded most often, in code order.
    often = sorted(currencies, key=lambda currency: (-totals.refunds[currency].count, currency))
    drawn = sorted(often[:MAX_REFUND_LINES])
    sessions_text = sessions_summary(days, totals)
    refunds_text = refunds_summary(days, totals)
    return ActivityChart(
        days=days,
        currencies=currencies,
        totals=totals,
        sessions_summary=sessions_text,
        refunds_summary=refunds_text,
        recovery_summary=recovery_summary(days, activity.recovery),
        sessions_svg=sessions_svg(days, sessions_text),
        refunds_svg=refunds_svg(days, drawn, refunds_text) if drawn else None,
        undrawn_currencies=[currency for currency in currencies if currency not in drawn],
    )


def day_figures(activity: Activity, first: date) -> list[DayFigures]:
    """One `DayFigures` per day of the window from `first`, zeros where nothing happened."""
    days = [DayFigures(first + timedelta(days=n), _no_sessions()) for n in range(DAYS)]
    by_day = {day.day: day for day in days}
    for sessions in activity.sessions:
        if sessions.day in by_day:
            by_day[sessions.day].sessions[OUTCOME_OF[SessionStatus(sessions.status)]] += sessions.count
    for refunds in activity.refunds:
        if refunds.day in by_day:
            by_day[refunds.day].refunds[refunds.currency] = Refunded(refunds.count, refunds.amount_minor)
    return days


def window_totals(days: Sequence[DayFigures]) -> DayFigures:
    """The sums of every day's figures (dated the last day)."""
    totals = DayFigures(days[-1].day, _no_sessions())
    for day in days:
        for key, count in day.sessions.items():
            totals.sessions[key] += count
        for currency, refunded in day.refunds.items():
            before = totals.refunded(currency)
            totals.refunds[currency] = Refunded(
                before.count + refunded.count, before.amount_minor + refunded.amount_minor
            )
    return totals


def _no_sessions() -> dict[str, int]:
    return {outcome.key: 0 for outcome in OUTCOMES}


def money_text(minor: int, currency: str) -> str:
    """`minor` units written in major units with the currency's decimal places (`12.50`)."""
    return f"{to_major_units(minor, currency):f}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def sessions_summary(days: Sequence[DayFigures], totals: DayFigures) -> str:
    window = f"from {days[0].day} to {days[-1].day} (UTC)"
    if not totals.total_sessions:
        return f"No sessions created {window}."
    outcomes = ", ".join(f"{totals.sessions[outcome.key]} {outcome.label.lower()}" for outcome in OUTCOMES)
    busiest = max(days, key=lambda day: (day.total_sessions, day.day))
    return (
        f"{_plural(totals.total_sessions, 'session')} created {window}: {outcomes}. "
        f"Busiest day {busiest.day}, with {_plural(busiest.total_sessions, 'session')}."
    )


def refunds_summary(days: Sequence[DayFigures], totals: DayFigures) -> str:
    window = f"from {days[0].day} to {days[-1].day} (UTC)"
    if not totals.refunds:
        return f"No completed refunds {window}."
    amounts = ", ".join(
        f"{money_text(refunded.amount_minor, currency)} {currency} in {_plural(refunded.count, 'refund')}"
        for currency, refunded in sorted(totals.refunds.items())
    )
    return f"Completed refunds {window}: {amounts}."


def recovery_summary(days: Sequence[DayFigures], recovery: Recovery) -> str:
    window = f"from {days[0].day} to {days[-1].day} (UTC)"
    if not recovery.sent_on:
        return f"No session created {window} was declined at its first provider and sent on to another."
    sent_on, recovered = recovery.sent_on, recovery.recovered
    share = round(Fraction(100 * recovered, sent_on))
    return (
        f"Recovered: {recovered} of {sent_on} ({share}%). Of the sessions created {window}, {sent_on} "
        f"{'was' if sent_on == 1 else 'were'} declined at their first provider and sent on to another; "
        f"{recovered} of them {'was' if recovered == 1 else 'were'} paid there."
    )


# --- Drawing --------------------------------------------------------------------------------------

LEFT = 36  # room for the scale's numbers
STEP = 20  # one day's width
RIGHT = LEFT + DAYS * STEP
WIDTH = RIGHT + 14  # room for the last date, centred under the last day
BAR = 14
BARS_TOP, BARS_HEIGHT = 8, 120
LINE_HEIGHT, LINE_GAP = 40, 26  # one currency's line, and the room above it for its label
AXIS_LABELS = 16  # below a plot: the dates


def _svg(name: str, height: int, title: str, summary: str) -> ET.Element:
    # No xmlns: the HTML parser puts an <svg> inside a page in the SVG namespace by itself.
    svg = ET.Element(
        "svg",
        {
            "viewBox": f"0 0 {WIDTH} {height}",
            "class": f"activity-chart activity-{name}",
            "role": "img",
            "aria-labelledby": f"activity-{name}-title",
            "aria-describedby": f"activity-{name}-desc",
        },
    )
    _element(svg, "title", title, id=f"activity-{name}-title")
    _element(svg, "desc", summary, id=f"activity-{name}-desc")
    return svg


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 3, 4, 5, 6, 8 times a power of ten that is at least `value` (and 1)."""
    power = 1
    while True:
        for step in (1, 2, 3, 4, 5, 6, 8):
            if step * power >= value:
                return step * power
        power *= 10


def _day_x(index: int) -> int:
    return LEFT + index * STEP


def _dates(svg: ET.Element, days: Sequence[DayFigures], y: int) -> None:
    """A date under every seventh day, counted back from today."""
    for index in range(len(days) - 1, -1, -7):
        label = days[index].day.strftime("%m-%d")
        _element(
            svg, "text", label, x=_day_x(index) + STEP // 2, y=y, text_anchor="middle", class_="activity-axis"
        )


def _scale(svg: ET.Element, top: int, height: int, label: str | None) -> None:
    """The plot's top and base lines, the top one labelled with its value when `label` is given."""
    for y in (top, top + height):
        _element(svg, "line", x1=LEFT, y1=y, x2=RIGHT, y2=y, class_="activity-grid")
    if label is not None:
        _element(svg, "text", label, x=LEFT - 4, y=top + 4, text_anchor="end", class_="activity-axis")
        _element(svg, "text", "0", x=LEFT - 4, y=top + height, text_anchor="end", class_="activity-axis")


def sessions_svg(days: Sequence[DayFigures], summary: str) -> Markup:
    """Stacked bars: each day's sessions by outcome, on a scale from 0 to a round number."""
    top_value = nice_ceiling(max(day.total_sessions for day in days))
    bottom = BARS_TOP + BARS_HEIGHT
    svg = _svg("sessions", bottom + AXIS_LABELS + 4, "Sessions per day, last 30 days, by outcome", summary)
    _scale(svg, BARS_TOP, BARS_HEIGHT, str(top_value))
    for index, day in enumerate(days):
        if not day.total_sessions:
            continue
        group = _element(svg, "g")
        counts = ", ".join(f"{day.sessions[outcome.key]} {outcome.label.lower()}" for outcome in OUTCOMES)
        _element(group, "title", f"{day.day}: {counts}")
        below = 0
        for outcome in OUTCOMES:
            count = day.sessions[outcome.key]
            if not count:
                continue
            y_low = bottom - Fraction(below * BARS_HEIGHT, top_value)
            y_high = bottom - Fraction((below + count) * BARS_HEIGHT, top_value)
            # Both edges rounded the same way: stacked bars meet without a gap or an overlap.
            _element(
                group,
                "rect",
                x=_day_x(index) + (STEP - BAR) // 2,
                y=_coordinate(y_high),
                width=BAR,
                height=_coordinate(Fraction(round(y_low * 100) - round(y_high * 100), 100)),
                class_=f"activity-{outcome.key}",
            )
            below += count
    _dates(svg, days, bottom + AXIS_LABELS)
    return _markup(svg)


def refunds_svg(days: Sequence[DayFigures], currencies: Sequence[str], summary: str) -> Markup:
    """One line per currency of the refunded amount per day, each on its own scale up to its
    busiest day, whose amount labels it."""
    panel = LINE_GAP + LINE_HEIGHT
    height = len(currencies) * panel + AXIS_LABELS + 4
    svg = _svg("refunds", height, "Completed refunds per day, last 30 days, by currency", summary)
    for number, currency in enumerate(currencies):
        top = number * panel + LINE_GAP
        peak = max(day.refunded(currency).amount_minor for day in days)
        label = f"Refunded in {currency} (top line: {money_text(peak, currency)} a day)"
        _element(svg, "text", label, x=LEFT, y=top - 8, class_="activity-label")
        _scale(svg, top, LINE_HEIGHT, None)
        line = _element(svg, "polyline", class_="activity-refund-line")
        dots = _element(svg, "g")
        points = []
        for index, day in enumerate(days):
            refunded = day.refunded(currency)
            x = _day_x(index) + STEP // 2
            y = _coordinate(top + LINE_HEIGHT - Fraction(refunded.amount_minor * LINE_HEIGHT, peak))
            points.append(f"{x},{y}")
            if refunded.count:
                dot = _element(dots, "circle", cx=x, cy=y, r=3, class_="activity-refund")
                amount = money_text(refunded.amount_minor, currency)
                _element(
                    dot, "title", f"{day.day}: {amount} {currency} in {_plural(refunded.count, 'refund')}"
                )
        line.set("points", " ".join(points))
    _dates(svg, days, len(currencies) * panel + AXIS_LABELS)
    return _markup(svg)
