"""The 30-day picture on the applications page: sessions per day by outcome and completed refunds
per day by currency, of the signed-in merchant's applications only, drawn as SVG and given as a table."""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
from payorch.http.console.activity import OUTCOME_OF, activity_chart
from payorch.http.services import PayorchApp
from payorch.storage.activity import Activity, DayRefunds, DaySessions
from payorch.storage.database import Connection, Database
from payorch.values.statuses import SessionStatus
from tests.clock import ShiftedClock
from tests.console.helpers import page, signed_in
from tests.helpers import (
    Client,
    Shop,
    create_session,
    eventually,
    expire_now,
    link_sandbox,
    new_application,
    new_shop,
    post_json,
    session_body,
)

COLUMNS = ("Paid", "Pending", "Failed or reversed", "All sessions", "Refunds")


@pytest.fixture
def today(clock: ShiftedClock) -> date:
    """Today by the service's clock; moved just past midnight (UTC) first when midnight is near, so
    no test straddles two days."""
    now = clock.now()
    midnight = datetime.combine(now.date() + timedelta(days=1), time(), UTC)
    if midnight - now < timedelta(minutes=10):
        clock.advance((midnight - now).total_seconds() + 1)
    return clock.now().date()


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def status_of(client: Client, shop: Shop, session_id: str) -> Any:
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    return await response.get_json()


async def new_session(client: Client, shop: Shop, total: str = "100.00", currency: str = "PLN") -> Any:
    response = await create_session(
        client, shop, f"activity-{uuid.uuid4()}", session_body(total=total, currency=currency)
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    return await response.get_json()


async def paid_session(client: Client, shop: Shop, total: str = "100.00", currency: str = "PLN") -> str:
    created = await new_session(client, shop, total, currency)
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})

    async def succeeded() -> bool:
        return bool((await status_of(client, shop, created["sessionId"]))["status"] == "SUCCEEDED")

    await eventually(succeeded)
    return str(created["sessionId"])


async def expired_session(client: Client, shop: Shop, db: Database) -> str:
    session_id = str((await new_session(client, shop))["sessionId"])
    await expire_now(db, session_id)

    async def failed() -> bool:
        return bool((await status_of(client, shop, session_id))["status"] == "FAILED")

    await eventually(failed)
    return session_id


async def completed_refund(client: Client, shop: Shop, session_id: str, amount: str) -> str:
    response = await post_json(
        client,
        f"/api/v1/sessions/{session_id}/refunds",
        {"amount": Decimal(amount)},
        {**shop.headers, "Idempotency-Key": f"refund-{uuid.uuid4()}"},
    )
    assert response.status_code in (201, 202), await response.get_data(as_text=True)
    refund_id = str((await response.get_json())["refundId"])

    async def completed() -> bool:
        refunds = (await status_of(client, shop, session_id))["refunds"]
        return any(item["id"] == refund_id and item["status"] == "COMPLETED" for item in refunds)

    await eventually(completed)
    return refund_id


async def made_days_ago(db: Database, table: str, row_id: str, days: int) -> None:
    """Move a session's or a refund's creation `days` days back, as if it had been made then."""
    assert table in ("checkout_sessions", "refunds")

    async def backdate(conn: Connection) -> None:
        await conn.execute(
            f"UPDATE {table} SET created_at = created_at - make_interval(days => $2) WHERE id = $1",  # noqa: S608
            uuid.UUID(row_id),
            days,
        )

    await db.transaction(backdate)


async def applications_page(app: PayorchApp, shop: Shop, console: Client | None = None) -> str:
    """The applications page, in `console` (signed in already) or in a new session."""
    if console is None:
        console = app.test_client()
        await signed_in(console, shop.merchant.email)
    response, html = await page(console, "/console/applications")
    assert response.status_code == 200
    return html


def figures(html: str) -> dict[str, dict[str, str]]:
    """The data table: for each day (and '30 days'), its cells by column heading."""
    found = re.search(r'<table id="activity-figures">.*?</table>', html, re.DOTALL)
    assert found, html
    table = ET.fromstring(found.group(0))  # noqa: S314 (our own page)
    headings = ["".join(cell.itertext()) for cell in table.iterfind("thead/tr/th")]
    rows: dict[str, dict[str, str]] = {}
    for row in [*table.iterfind("tbody/tr"), *table.iterfind("tfoot/tr")]:
        cells = ["".join(cell.itertext()) for cell in row]
        rows[cells[0]] = dict(zip(headings[1:], cells[1:], strict=True))
    return rows


def counts(row: dict[str, str]) -> tuple[int, ...]:
    return tuple(int(row[column]) for column in COLUMNS)


def svgs(html: str) -> list[ET.Element]:
    return [
        ET.fromstring(svg)  # noqa: S314 (our own page)
        for svg in re.findall(r'<svg [^>]*class="activity-chart.*?</svg>', html, re.DOTALL)
    ]


async def test_each_day_shows_its_sessions_by_outcome(
    app: PayorchApp, client: Client, shop: Shop, db: Database, today: date
) -> None:
    paid = await paid_session(client, shop)
    pending = str((await new_session(client, shop))["sessionId"])
    expired = await expired_session(client, shop, db)
    await new_session(client, shop)  # another pending one, today
    await made_days_ago(db, "checkout_sessions", paid, 3)
    await made_days_ago(db, "checkout_sessions", pending, 3)
    await made_days_ago(db, "checkout_sessions", expired, 29)
    rows = figures(await applications_page(app, shop))
    assert counts(rows[str(today)]) == (0, 1, 0, 1, 0)
    assert counts(rows[str(today - timedelta(days=3))]) == (1, 1, 0, 2, 0)
    assert counts(rows[str(today - timedelta(days=29))]) == (0, 0, 1, 1, 0)
    assert counts(rows["30 days"]) == (1, 2, 1, 4, 0)


async def test_days_without_activity_show_zero(
    app: PayorchApp, client: Client, shop: Shop, db: Database, today: date
) -> None:
    session_id = str((await new_session(client, shop))["sessionId"])
    await made_days_ago(db, "checkout_sessions", session_id, 10)
    rows = figures(await applications_page(app, shop))
    days = [str(today - timedelta(days=n)) for n in range(29, -1, -1)]
    assert list(rows) == [*days, "30 days"]
    for day in days:
        expected = (0, 1, 0, 1, 0) if day == str(today - timedelta(days=10)) else (0, 0, 0, 0, 0)
        assert counts(rows[day]) == expected, day


async def test_another_merchants_sessions_and_refunds_never_count(
    app: PayorchApp, client: Client, shop: Shop, db: Database, settings: Settings, today: date
) -> None:
    other = await new_shop(client, db, settings)
    paid = await paid_session(client, other)
    await completed_refund(client, other, paid, "10.00")
    await new_session(client, other)
    await new_session(client, shop)
    html = await applications_page(app, shop)
    rows = figures(html)
    assert counts(rows[str(today)]) == (0, 1, 0, 1, 0)
    assert "Refunded PLN" not in rows[str(today)]
    assert "No completed refunds" in html


async def test_sessions_of_every_application_of_the_merchant_count(
    app: PayorchApp, client: Client, shop: Shop, today: date
) -> None:
    second = await new_application(client, shop.merchant, "Second shop")
    await link_sandbox(client, shop.merchant, second["id"])
    response = await post_json(
        client,
        "/api/v1/sessions",
        session_body(applicationId=second["id"]),
        {**shop.merchant.headers, "Idempotency-Key": "second-application"},
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    await new_session(client, shop)
    assert counts(figures(await applications_page(app, shop))[str(today)]) == (0, 2, 0, 2, 0)


async def test_completed_refunds_are_summed_per_day_and_currency(
    app: PayorchApp, client: Client, shop: Shop, db: Database, today: date
) -> None:
    pln = await paid_session(client, shop, "100.00", "PLN")
    eur = await paid_session(client, shop, "50.00", "EUR")
    await completed_refund(client, shop, pln, "0.10")
    await completed_refund(client, shop, pln, "0.20")
    await completed_refund(client, shop, eur, "12.50")
    older = await completed_refund(client, shop, pln, "1.00")
    await made_days_ago(db, "refunds", older, 2)
    html = await applications_page(app, shop)
    rows = figures(html)
    assert rows[str(today)]["Refunds"] == "3"
    assert (rows[str(today)]["Refunded PLN"], rows[str(today)]["Refunded EUR"]) == ("0.30", "12.50")
    two_days_ago = rows[str(today - timedelta(days=2))]
    assert (two_days_ago["Refunds"], two_days_ago["Refunded PLN"], two_days_ago["Refunded EUR"]) == (
        "1",
        "1.00",
        "0.00",
    )
    assert (rows["30 days"]["Refunded PLN"], rows["30 days"]["Refunded EUR"]) == ("1.30", "12.50")
    assert "1.30 PLN in 3 refunds" in html
    assert "12.50 EUR in 1 refund" in html


async def test_a_refund_that_failed_is_not_counted(
    app: PayorchApp, client: Client, shop: Shop, db: Database, today: date
) -> None:
    created = await new_session(client, shop)
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4000000000005126"})
    session_id = str(created["sessionId"])

    async def succeeded() -> bool:
        return bool((await status_of(client, shop, session_id))["status"] == "SUCCEEDED")

    await eventually(succeeded)
    response = await post_json(
        client,
        f"/api/v1/sessions/{session_id}/refunds",
        {"amount": Decimal("5.00")},
        {**shop.headers, "Idempotency-Key": "refund-that-fails"},
    )
    assert response.status_code in (201, 202)

    async def failed() -> bool:
        refunds = (await status_of(client, shop, session_id))["refunds"]
        return bool(refunds and refunds[0]["status"] == "FAILED")

    await eventually(failed)
    rows = figures(await applications_page(app, shop))
    assert rows[str(today)]["Refunds"] == "0"
    assert counts(rows[str(today)]) == (1, 0, 0, 1, 0)


async def test_the_window_ends_today_by_the_service_clock(
    app: PayorchApp, client: Client, shop: Shop, db: Database, clock: ShiftedClock, today: date
) -> None:
    await new_session(client, shop)
    oldest = str((await new_session(client, shop))["sessionId"])
    await made_days_ago(db, "checkout_sessions", oldest, 29)
    clock.advance(timedelta(days=1).total_seconds())
    rows = figures(await applications_page(app, shop))
    tomorrow = today + timedelta(days=1)
    assert list(rows)[-2] == str(tomorrow)
    assert rows[str(tomorrow)]["All sessions"] == "0"
    assert rows[str(today)]["All sessions"] == "1"  # the other one, a day later
    assert str(today - timedelta(days=29)) not in rows  # the oldest fell out of the window
    assert rows["30 days"]["All sessions"] == "1"


async def test_the_charts_are_svg_images_with_a_title_and_a_summary(
    app: PayorchApp, client: Client, shop: Shop, db: Database, today: date
) -> None:
    paid = await paid_session(client, shop)
    await completed_refund(client, shop, paid, "25.00")
    await new_session(client, shop)
    html = await applications_page(app, shop)
    charts = svgs(html)
    assert len(charts) == 2
    for chart in charts:
        assert chart.tag == "svg"
        assert chart.get("role") == "img"
        title = chart.find("title")
        assert title is not None and title.text
        assert chart.get("aria-labelledby") == title.get("id")
        desc = chart.find("desc")
        assert desc is not None and desc.get("id") == chart.get("aria-describedby")
    sessions, refunds = charts
    assert "2 sessions created" in (sessions.findtext("desc") or "")
    assert "1 paid, 1 pending, 0 failed or reversed" in (sessions.findtext("desc") or "")
    assert len(sessions.findall(".//rect")) == 2  # today's bar: a paid and a pending part
    assert "25.00 PLN in 1 refund" in (refunds.findtext("desc") or "")
    assert len(refunds.findall(".//circle")) == 1


async def test_the_picture_has_no_inline_style_or_script(
    app: PayorchApp, client: Client, shop: Shop, today: date
) -> None:
    await new_session(client, shop)
    html = await applications_page(app, shop)
    assert "style=" not in html
    assert re.findall(r"<script(?![^>]*\ssrc=)", html) == []
    assert re.search(r"\son[a-z]+=", html) is None
    for chart in svgs(html):
        for node in chart.iter():
            assert "style" not in node.attrib
            assert not any(name.startswith("on") for name in node.attrib)
            assert node.tag != "script"


async def test_a_merchant_without_sessions_sees_empty_charts_and_zeros(
    app: PayorchApp, shop: Shop, today: date
) -> None:
    html = await applications_page(app, shop)
    (sessions,) = svgs(html)  # no refunds: no refunds chart, a sentence instead
    assert sessions.findall(".//rect") == []
    assert "No sessions created" in (sessions.findtext("desc") or "")
    assert "No completed refunds" in html
    assert counts(figures(html)["30 days"]) == (0, 0, 0, 0, 0)


def test_every_session_status_has_an_outcome() -> None:
    assert set(OUTCOME_OF) == set(SessionStatus)


def test_amounts_keep_their_currencys_decimals() -> None:
    day = date(2025, 5, 14)
    chart = activity_chart(
        Activity(
            sessions=[DaySessions(day, "REVERSED", 1), DaySessions(day, "REFUNDED", 2)],
            refunds=[DayRefunds(day, "JPY", 1, 500), DayRefunds(day, "KWD", 2, 1234)],
        ),
        day - timedelta(days=29),
    )
    last = chart.days[-1]
    assert last.sessions == {"paid": 2, "pending": 0, "failed": 1}
    assert chart.money(last.refunded("JPY").amount_minor, "JPY") == "500"
    assert chart.money(last.refunded("KWD").amount_minor, "KWD") == "1.234"
    assert "1.234 KWD in 2 refunds" in chart.refunds_summary
    assert chart.money(0, "KWD") == "0.000"
