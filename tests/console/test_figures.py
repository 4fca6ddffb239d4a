"""The figures of the last 30 days: the daily counters kept by the transactions that write each
outcome (exact whatever the order or repetition of events), the backfill of migration 0036, and
the charts drawn from them on an application's overview and on the applications page."""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from payorch.config import Settings
from payorch.http.console.charts import bar_chart
from payorch.http.services import PayorchApp
from payorch.storage.daily_counters import DayCounts, daily_counts, in_counter_order
from payorch.storage.database import Connection, Database
from payorch.storage.migrations import migrate
from tests.console.helpers import page, signed_in
from tests.console.test_activity import completed_refund, new_session, paid_session, status_of, today
from tests.helpers import Client, Shop, eventually, new_shop, post_json
from tests.http.test_checkout_flow import _deliver, _signed_event

__all__ = ["today"]  # a fixture used here

PAID_CARD, DECLINED_CARD, REFUND_FAILS_CARD = "4242424242424242", "4000000000000002", "4000000000005126"
EMPTY = (0, 0, 0, 0, 0, 0)


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def merchant_of(db: Database, application_id: str) -> uuid.UUID:
    async def read(conn: Connection) -> uuid.UUID:
        found: uuid.UUID = await conn.fetchval(
            "SELECT merchant_id FROM applications WHERE id = $1", uuid.UUID(application_id)
        )
        return found

    return await db.autocommit(read)


async def counters(db: Database, shop: Shop, today: date) -> dict[tuple[str, str], tuple[int, ...]]:
    """The shop's counters of the last 30 days by (provider, currency), summed over the days: created,
    approved, approved minor units, declines, refunds, refunded minor units."""
    merchant_id = await merchant_of(db, shop.application_id)
    rows: list[DayCounts] = await db.snapshot(
        daily_counts,
        merchant_id,
        uuid.UUID(shop.application_id),
        first=today - timedelta(days=29),
        last=today,
    )
    summed: dict[tuple[str, str], tuple[int, ...]] = {}
    for row in rows:
        figures = (
            row.created,
            row.approved,
            row.approved_minor,
            row.declines,
            row.refunds,
            row.refunded_minor,
        )
        before = summed.get((row.provider, row.currency), EMPTY)
        summed[(row.provider, row.currency)] = tuple(a + b for a, b in zip(before, figures, strict=True))
    return summed


async def counted_when(
    db: Database, shop: Shop, today: date, wanted: dict[tuple[str, str], tuple[int, ...]]
) -> None:
    """Wait for the counters to read `wanted` (events arrive from the sandbox by webhook)."""

    async def matches() -> bool:
        return await counters(db, shop, today) == wanted

    try:
        await eventually(matches, timeout_s=5)
    except Exception:
        assert await counters(db, shop, today) == wanted
        raise


async def pay(client: Client, session: dict[str, Any], card: str = PAID_CARD) -> None:
    await client.post(urlsplit(session["checkoutUrl"]).path, form={"card_number": card})


async def test_creates_and_approvals_are_counted_per_provider_and_currency_with_their_amounts(
    client: Client, shop: Shop, db: Database, today: date
) -> None:
    await paid_session(client, shop, "100.00")
    await paid_session(client, shop, "50.25")
    await new_session(client, shop, "7.00")
    await paid_session(client, shop, "20.00", "EUR")
    await counted_when(
        db,
        shop,
        today,
        {("sandbox", "PLN"): (3, 2, 15025, 0, 0, 0), ("sandbox", "EUR"): (1, 1, 2000, 0, 0, 0)},
    )


async def test_sessions_created_together_are_each_counted_once(
    client: Client, shop: Shop, db: Database, today: date
) -> None:
    async with trio.open_nursery() as clients:
        for number in range(30):
            clients.start_soon(new_session, client, shop, "1.00", "PLN" if number % 3 else "EUR")
    assert await counters(db, shop, today) == {
        ("sandbox", "PLN"): (20, 0, 0, 0, 0, 0),
        ("sandbox", "EUR"): (10, 0, 0, 0, 0, 0),
    }


def test_a_create_batch_adds_to_each_counter_row_once_in_key_order() -> None:
    day = date(2026, 1, 2)
    rows = {"a": (day, "sandbox", "PLN"), "b": (day, "sandbox", "EUR"), "c": (day, "sandbox", "PLN")}
    assert in_counter_order(["a", "b", "c"], rows.__getitem__) == [("b", 1), ("a", 2), ("c", 0)]


async def test_a_success_reported_again_counts_the_session_approved_once(
    client: Client, shop: Shop, db: Database, settings: Settings, today: date
) -> None:
    session_id = await paid_session(client, shop, "100.00")
    for event_id in ("evt_sbx_again", "evt_sbx_again", "evt_sbx_once_more"):
        response = await _deliver(client, shop, await _signed_event(db, settings, shop, session_id, event_id))
        assert response.status_code == 200
        assert (await response.get_json())["applied"] is False
    assert await counters(db, shop, today) == {("sandbox", "PLN"): (1, 1, 10000, 0, 0, 0)}


async def test_a_session_declined_and_then_paid_counts_one_approval_and_one_decline(
    client: Client, shop: Shop, db: Database, today: date
) -> None:
    created = await new_session(client, shop, "30.00")
    await pay(client, created, DECLINED_CARD)
    await counted_when(db, shop, today, {("sandbox", "PLN"): (1, 0, 0, 1, 0, 0)})
    await pay(client, created, PAID_CARD)
    await counted_when(db, shop, today, {("sandbox", "PLN"): (1, 1, 3000, 1, 0, 0)})
    assert (await status_of(client, shop, created["sessionId"]))["status"] == "SUCCEEDED"


async def test_full_and_partial_refunds_count_once_each_with_their_amounts_and_a_failed_one_not_at_all(
    client: Client, shop: Shop, db: Database, today: date
) -> None:
    partly = await paid_session(client, shop, "100.00")
    await completed_refund(client, shop, partly, "30.00")
    await completed_refund(client, shop, partly, "70.00")  # the rest: now fully refunded
    whole = await paid_session(client, shop, "12.50")
    await completed_refund(client, shop, whole, "12.50")
    created = await new_session(client, shop, "5.00")
    await pay(client, created, REFUND_FAILS_CARD)

    async def paid() -> bool:
        return bool((await status_of(client, shop, created["sessionId"]))["status"] == "SUCCEEDED")

    await eventually(paid)
    response = await post_json(
        client,
        f"/api/v1/sessions/{created['sessionId']}/refunds",
        {"amount": Decimal("5.00")},
        {**shop.headers, "Idempotency-Key": "refund-that-fails"},
    )
    assert response.status_code in (201, 202)

    async def failed() -> bool:
        refunds = (await status_of(client, shop, created["sessionId"]))["refunds"]
        return bool(refunds and refunds[0]["status"] == "FAILED")

    await eventually(failed)
    await counted_when(db, shop, today, {("sandbox", "PLN"): (3, 3, 11750, 0, 3, 11250)})


async def test_another_merchants_counters_are_never_read(
    client: Client, shop: Shop, db: Database, settings: Settings, today: date
) -> None:
    other = await new_shop(client, db, settings)
    await paid_session(client, other, "40.00")
    await counted_when(db, other, today, {("sandbox", "PLN"): (1, 1, 4000, 0, 0, 0)})
    mine = await merchant_of(db, shop.application_id)
    window = {"first": today - timedelta(days=29), "last": today}
    assert await db.snapshot(daily_counts, mine, None, **window) == []
    # Naming the other merchant's application reads nothing either.
    assert await db.snapshot(daily_counts, mine, uuid.UUID(other.application_id), **window) == []


@pytest.mark.fresh_database
async def test_the_migration_backfills_the_counters_of_the_last_30_days_from_the_stored_rows(
    client: Client, shop: Shop, db: Database, today: date
) -> None:
    refunded = await paid_session(client, shop, "100.00")
    await completed_refund(client, shop, refunded, "30.00")
    declined = await new_session(client, shop, "9.00")
    await pay(client, declined, DECLINED_CARD)
    await paid_session(client, shop, "20.00", "EUR")
    long_ago = await paid_session(client, shop, "10.00")
    await counted_when(
        db,
        shop,
        today,
        {("sandbox", "PLN"): (3, 2, 11000, 1, 1, 3000), ("sandbox", "EUR"): (1, 1, 2000, 0, 0, 0)},
    )

    async def history_rewritten(conn: Connection) -> None:
        # One session from before the window; the counters as a database before migration 0036 had none.
        await conn.execute(
            "UPDATE checkout_sessions SET created_at = created_at - interval '40 days' WHERE id = $1",
            uuid.UUID(long_ago),
        )
        await conn.execute(
            "UPDATE routing_outcomes SET recorded_at = recorded_at - interval '40 days'"
            " WHERE session_id = $1",
            uuid.UUID(long_ago),
        )
        await conn.execute("DROP TABLE daily_counters")
        await conn.execute("DELETE FROM schema_migrations WHERE version = 36")

    await db.transaction(history_rewritten)
    await migrate(db)
    assert await counters(db, shop, today) == {
        ("sandbox", "PLN"): (2, 1, 10000, 1, 1, 3000),
        ("sandbox", "EUR"): (1, 1, 2000, 0, 0, 0),
    }


# --- The charts ---------------------------------------------------------------------------------


def charts(html: str) -> dict[str, ET.Element]:
    """The figures' charts of a page, by id."""
    return {
        svg.attrib["id"]: svg
        for svg in (
            ET.fromstring(found)  # noqa: S314 (our own page)
            for found in re.findall(r'<svg [^>]*class="chart .*?</svg>', html, re.DOTALL)
        )
    }


def bar_titles(svg: ET.Element) -> list[str]:
    return [str(rect.findtext("title")) for rect in svg.iter("rect")]


def dot_titles(svg: ET.Element) -> list[str]:
    return [str(dot.findtext("title")) for dot in svg.iter("circle")]


def test_a_bar_chart_draws_a_titled_bar_per_positive_value_and_names_itself() -> None:
    svg = ET.fromstring(  # noqa: S314 (our own drawing)
        bar_chart(
            name="probe",
            title="Probe",
            summary="Three values, the largest 8.",
            labels=["a", "b", "c", "d"],
            values=[3, 0, 8, 1],
            titles=["a is 3", "b is 0", "c is 8", "d is 1"],
        )
    )
    assert svg.attrib["role"] == "img"
    assert svg.attrib["aria-label"] == "Three values, the largest 8."
    assert svg.findtext("title") == "Probe"
    assert bar_titles(svg) == ["a is 3", "c is 8", "d is 1"]
    heights = [float(rect.attrib["height"]) for rect in svg.iter("rect")]
    assert heights[1] == pytest.approx(8 * heights[2]) == pytest.approx(8 / 3 * heights[0])


async def test_an_applications_overview_draws_its_volume_approval_and_refunds_from_the_counters(
    app: PayorchApp, client: Client, shop: Shop, db: Database, today: date
) -> None:
    paid = await paid_session(client, shop, "100.00")
    await completed_refund(client, shop, paid, "25.00")
    created = await new_session(client, shop, "40.00")
    await pay(client, created, DECLINED_CARD)
    await pay(client, created, PAID_CARD)
    await paid_session(client, shop, "7.00", "EUR")
    await counted_when(
        db,
        shop,
        today,
        {("sandbox", "PLN"): (2, 2, 14000, 1, 1, 2500), ("sandbox", "EUR"): (1, 1, 700, 0, 0, 0)},
    )
    console = app.test_client()
    await signed_in(console, shop.merchant.email)
    response, html = await page(console, f"/console/applications/{shop.application_id}")
    assert response.status_code == 200
    drawn = charts(html)
    assert set(drawn) == {"chart-volume-EUR", "chart-volume-PLN", "chart-approval", "chart-refunds"}
    assert bar_titles(drawn["chart-volume-PLN"]) == [f"{today}: 140.00 PLN in 2 payments"]
    assert bar_titles(drawn["chart-volume-EUR"]) == [f"{today}: 7.00 EUR in 1 payment"]
    assert dot_titles(drawn["chart-approval"]) == [f"{today}, sandbox: 3 of 4 tries approved (75%)"]
    assert bar_titles(drawn["chart-refunds"]) == [f"{today}: 1 refund (25.00 PLN)"]
    assert "140.00 PLN in 2 payments" in drawn["chart-volume-PLN"].attrib["aria-label"]
    table = re.search(r'<table id="figures-table">.*?</table>', html, re.DOTALL)
    assert table is not None
    rows = [
        ["".join(cell.itertext()) for cell in row]
        for row in ET.fromstring(table.group(0)).iterfind("tbody/tr")  # noqa: S314 (our own page)
    ]
    assert rows == [
        [str(today), "sandbox", "EUR", "1", "1", "7.00", "0", "0", "0.00"],
        [str(today), "sandbox", "PLN", "2", "2", "140.00", "1", "1", "25.00"],
    ]


async def test_the_applications_page_sums_every_application_of_the_merchant_and_no_other(
    app: PayorchApp, client: Client, shop: Shop, db: Database, settings: Settings, today: date
) -> None:
    await paid_session(client, shop, "10.00")
    other = await new_shop(client, db, settings)
    await paid_session(client, other, "999.00")
    second = await _second_application(client, shop, db, settings)
    await paid_session(client, second, "5.00")
    console = app.test_client()
    await signed_in(console, shop.merchant.email)
    response, html = await page(console, "/console/applications")
    assert response.status_code == 200
    drawn = charts(html)
    assert bar_titles(drawn["chart-volume-PLN"]) == [f"{today}: 15.00 PLN in 2 payments"]
    assert "999.00" not in html


async def _second_application(client: Client, shop: Shop, db: Database, settings: Settings) -> Shop:
    """Another application of the shop's merchant, linked to the sandbox, with its API key."""
    from tests.helpers import link_sandbox, new_api_key, new_application

    application = await new_application(client, shop.merchant, "Second shop")
    await link_sandbox(client, shop.merchant, application["id"])
    key = await new_api_key(client, shop.merchant, application["id"])
    return Shop(merchant=shop.merchant, application_id=application["id"], api_key=key["key"])
