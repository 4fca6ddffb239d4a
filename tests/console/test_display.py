"""How the console writes times and the API's values: readable, the exact value on hover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from payorch.http.console.display import console_time, label, labelled, readable_time
from payorch.http.services import PayorchApp
from tests.console.helpers import page, signed_in_browser
from tests.helpers import Client, Merchant, new_api_key, new_application


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("PARTIALLY_REFUNDED", "Partially refunded"),
        ("SUCCEEDED", "Succeeded"),
        ("CARD_DECLINED", "Card declined"),
        ("card", "Card"),
        ("apple_pay", "Apple Pay"),
        ("blik", "BLIK"),
        ("active", "Active"),
        ("sandbox", "Sandbox"),
    ],
)
def test_a_value_reads_as_words(value: str, read: str) -> None:
    assert label(value) == read


def test_a_label_keeps_the_value_on_hover_and_escapes_both() -> None:
    assert labelled("PARTIALLY_REFUNDED") == '<span title="PARTIALLY_REFUNDED">Partially refunded</span>'
    assert labelled('a"<b>') == '<span title="a&#34;&lt;b&gt;">A&#34;&lt;b&gt;</span>'


def test_a_time_reads_in_utc_to_the_minute_with_the_exact_time_on_hover() -> None:
    moment = datetime(2026, 11, 5, 21, 14, 5, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert readable_time(moment) == "5 Nov 2026, 20:14 UTC"
    exact = "2026-11-05T20:14:05.123Z"
    assert console_time(moment) == f'<time datetime="{exact}" title="{exact}">5 Nov 2026, 20:14 UTC</time>'
    # The API's text of a time is the same time.
    assert console_time("2026-11-05T20:14:05.123Z") == console_time(moment)
    assert console_time(None) == ""
    assert readable_time(datetime(2027, 1, 31, 0, 0, tzinfo=UTC)) == "31 Jan 2027, 00:00 UTC"


async def test_pages_write_times_and_statuses_readably(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await new_api_key(client, merchant, application["id"])
    console, _ = await signed_in_browser(app, merchant.email)
    _, html = await page(console, f"/console/applications/{application['id']}")
    assert "<dt>Created</dt><dd><time datetime=" in html
    assert '<td class="status-active"><span title="active">Active</span></td>' in html
    assert "T" not in html.split("<dt>Created</dt><dd>")[1].split(">")[2].split("<")[0]  # no ISO text shown
