"""The figures of the last 30 UTC days, read from the daily counters (`storage.daily_counters`):
for one application on its overview, for all the merchant's applications on the applications page.

Three pictures (`charts.py`) and one table with every figure:
- volume: the amount of the sessions approved per day, one chart per currency (amounts in two
  currencies are never added);
- approval rate: per day and provider, the tries approved out of the tries the provider answered
  (approved plus declined); a session declined and then paid is one approval and one decline, so
  its provider shows 1 of 2 that day;
- refunds: the refunds completed per day, their amounts per currency in each bar's title.

A session counts on the UTC day it was created, approved on the day it was paid, a decline on the
day it was reported, a refund on the day it completed.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from fractions import Fraction

from markupsafe import Markup

from payorch.http.auth import Principal
from payorch.http.console.activity import DAYS, money_text
from payorch.http.console.charts import Series, bar_chart, line_chart, nice_ceiling
from payorch.http.services import services
from payorch.storage.daily_counters import DayCounts, daily_counts


@dataclass(frozen=True)
class Chart:
    heading: str
    svg: Markup
    summary: str


@dataclass(frozen=True)
class Row:
    """One line of the table: a day, provider and currency with something counted."""

    day: date
    provider: str
    currency: str
    created: int
    approved: int
    approved_amount: str
    declines: int
    refunds: int
    refunded_amount: str


@dataclass(frozen=True)
class Figures:
    """What `console/figures.html` shows."""

    first: date
    last: date
    scope: str  # "this application", "all your applications"
    volume: list[Chart]  # one per currency approved in the window, in code order
    approval: Chart | None  # None without a try answered in the window
    refunds: Chart
    rows: list[Row]  # oldest first, then by provider and currency


async def figures_of(principal: Principal, application_id: uuid.UUID | None) -> Figures:
    """The figures of the principal's merchant's application `application_id` (all of them when
    None) over the last 30 UTC days, today by the service's clock included."""
    last = services().context.clock.now().astimezone(UTC).date()
    first = last - timedelta(days=DAYS - 1)
    counts = await services().context.db.snapshot(
        daily_counts, principal.merchant_id, application_id, first=first, last=last
    )
    scope = "this application" if application_id is not None else "all your applications"
    return figures(counts, first, scope)


def figures(counts: Sequence[DayCounts], first: date, scope: str) -> Figures:
    """The charts and table of the `DAYS` days from `first` (counts outside are ignored)."""
    days = [first + timedelta(days=n) for n in range(DAYS)]
    inside = [count for count in counts if first <= count.day <= days[-1]]
    return Figures(
        first=first,
        last=days[-1],
        scope=scope,
        volume=volume_charts(days, inside),
        approval=approval_chart(days, inside),
        refunds=refunds_chart(days, inside),
        rows=[
            Row(
                day=count.day,
                provider=count.provider,
                currency=count.currency,
                created=count.created,
                approved=count.approved,
                approved_amount=money_text(count.approved_minor, count.currency),
                declines=count.declines,
                refunds=count.refunds,
                refunded_amount=money_text(count.refunded_minor, count.currency),
            )
            for count in sorted(inside, key=lambda count: (count.day, count.provider, count.currency))
        ],
    )


def _labels(days: Sequence[date]) -> list[str]:
    return [day.strftime("%m-%d") for day in days]


def _window(days: Sequence[date]) -> str:
    return f"from {days[0]} to {days[-1]} (UTC)"


def _plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or word + 's'}"


def volume_charts(days: Sequence[date], counts: Sequence[DayCounts]) -> list[Chart]:
    """A bar chart per currency of the amount approved each day."""
    amount: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    approved: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for count in counts:
        if count.approved:
            amount[count.currency][count.day] += count.approved_minor
            approved[count.currency][count.day] += count.approved
    charts = []
    for currency in sorted(amount):
        per_day = [amount[currency][day] for day in days]
        paid = [approved[currency][day] for day in days]
        total = sum(per_day)
        busiest = max(range(len(days)), key=lambda index: (per_day[index], days[index]))
        summary = (
            f"Approved payments in {currency} {_window(days)}: {money_text(total, currency)} {currency} "
            f"in {_plural(sum(paid), 'payment')}. Busiest day {days[busiest]}, with "
            f"{money_text(per_day[busiest], currency)} {currency}."
        )
        charts.append(
            Chart(
                heading=f"Volume in {currency}",
                svg=bar_chart(
                    name=f"volume-{currency}",
                    title=f"Approved volume per day in {currency}, last {DAYS} days",
                    summary=summary,
                    labels=_labels(days),
                    values=per_day,
                    titles=[
                        f"{day}: {money_text(minor, currency)} {currency} in {_plural(count, 'payment')}"
                        for day, minor, count in zip(days, per_day, paid, strict=True)
                    ],
                    top_label=money_text(nice_ceiling(max(per_day)), currency),
                ),
                summary=summary,
            )
        )
    return charts


def approval_chart(days: Sequence[date], counts: Sequence[DayCounts]) -> Chart | None:
    """A line per provider of the share of its answered tries approved each day, in percent."""
    approved: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    declined: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for count in counts:
        if count.approved or count.declines:
            approved[count.provider][count.day] += count.approved
            declined[count.provider][count.day] += count.declines
    if not approved:
        return None
    series = []
    totals = []
    for provider in sorted(approved):
        values: list[int | Fraction | None] = []
        titles = []
        for day in days:
            paid, refused = approved[provider][day], declined[provider][day]
            tries = paid + refused
            share = Fraction(100 * paid, tries) if tries else None
            values.append(share)
            titles.append(
                f"{day}, {provider}: {paid} of {_plural(tries, 'try', 'tries')} approved ({round(share)}%)"
                if share is not None
                else f"{day}, {provider}: no tries"
            )
        series.append(Series(provider, values, titles))
        paid_all = sum(approved[provider].values())
        tries_all = paid_all + sum(declined[provider].values())
        totals.append(f"{provider} {paid_all} of {tries_all} ({round(Fraction(100 * paid_all, tries_all))}%)")
    summary = (
        f"Share of tries approved per day and provider {_window(days)}, a try being a payment the "
        f"provider approved or declined: {'; '.join(totals)}."
    )
    svg = line_chart(
        name="approval",
        title=f"Approval rate per day and provider, last {DAYS} days",
        summary=summary,
        labels=_labels(days),
        series=series,
        top_value=100,
        top_label="100%",
    )
    return Chart(heading="Approval rate", svg=svg, summary=summary)


def refunds_chart(days: Sequence[date], counts: Sequence[DayCounts]) -> Chart:
    """A bar per day of the refunds completed, titled with their amounts per currency."""
    number: dict[date, int] = defaultdict(int)
    amount: dict[date, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for count in counts:
        if count.refunds:
            number[count.day] += count.refunds
            amount[count.day][count.currency] += count.refunded_minor

    def amounts(of: dict[str, int]) -> str:
        return ", ".join(
            f"{money_text(minor, currency)} {currency}" for currency, minor in sorted(of.items())
        )

    everything: dict[str, int] = defaultdict(int)
    for per_currency in amount.values():
        for currency, minor in per_currency.items():
            everything[currency] += minor
    total = sum(number.values())
    summary = (
        f"Completed refunds {_window(days)}: {_plural(total, 'refund')}, {amounts(everything)}."
        if total
        else f"No completed refunds {_window(days)}."
    )
    svg = bar_chart(
        name="refunds",
        title=f"Completed refunds per day, last {DAYS} days",
        summary=summary,
        labels=_labels(days),
        values=[number[day] for day in days],
        titles=[
            f"{day}: {_plural(number[day], 'refund')}" + (f" ({amounts(amount[day])})" if number[day] else "")
            for day in days
        ],
    )
    return Chart(heading="Refunds", svg=svg, summary=summary)
