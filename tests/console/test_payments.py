"""The console's Payments page (the merchant's sessions across its applications, searched, in keyset
pages, exported as CSV) and a session's page: its customer, addresses and items as given at create,
and one timeline of its attempts, refunds, events and deliveries."""

from __future__ import annotations

import csv
import io
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape

from payorch.config import Settings
from payorch.storage.database import Connection, Database
from tests.console import test_sessions as console_sessions
from tests.console.helpers import page
from tests.helpers import (
    Client,
    Shop,
    create_session,
    link_sandbox,
    new_api_key,
    new_application,
    new_shop,
    post_json,
    session_body,
)
from tests.http.test_refunds import paid_session, record_when

shop, console = console_sessions.shop, console_sessions.console  # the fixtures of the sessions' pages


async def second_shop(client: Client, shop: Shop, name: str = "Outlet") -> Shop:
    """Another application of the same merchant, linked to the sandbox."""
    application = (await new_application(client, shop.merchant, name))["id"]
    await link_sandbox(client, shop.merchant, application)
    key = await new_api_key(client, shop.merchant, application)
    return Shop(shop.merchant, application, key["key"])


async def new_session(client: Client, shop: Shop, **extra: object) -> str:
    response = await create_session(client, shop, f"k-{uuid.uuid4()}", session_body(**extra))
    assert response.status_code == 201, await response.get_data(as_text=True)
    return str((await response.get_json())["sessionId"])


async def insert_sessions(db: Database, shop: Shop, count: int) -> list[str]:
    """`count` sessions stored straight, a minute apart, newest last; their ids."""
    ids = [uuid.uuid4() for _ in range(count)]

    async def insert(conn: Connection) -> None:
        for number, session_id in enumerate(ids):
            await conn.execute(
                """INSERT INTO checkout_sessions
                       (id, application_id, order_reference, amount_minor, currency, status,
                        payment_method, customer, created_at, updated_at)
                   VALUES ($1, $2, $3, 500, 'EUR', 'PENDING', 'card', '{"email": "many@example.com"}',
                           $4, $4)""",
                session_id,
                uuid.UUID(shop.application_id),
                f"bulk-{number}",
                datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=number),
            )

    await db.transaction(insert)
    return [str(session_id) for session_id in ids]


async def test_payments_lists_the_sessions_of_every_application_newest_first(
    client: Client, db: Database, settings: Settings, shop: Shop, console: Client
) -> None:
    outlet = await second_shop(client, shop)
    older = await new_session(client, shop, orderReference="shop-order")
    newer = await new_session(client, outlet, orderReference="outlet-order")
    not_yours = await new_session(client, await new_shop(client, db, settings))
    response, html = await page(console, "/console/payments")
    assert response.status_code == 200
    assert html.index(newer) < html.index(older)
    assert f'href="/console/sessions/{older}"' in html
    for shown in ("Outlet", "Shop", "buyer@example.com", "100.00 PLN", 'aria-current="page">Payments'):
        assert shown in html, shown
    assert not_yours not in html


async def test_every_console_page_links_the_payments(console: Client) -> None:
    _, html = await page(console, "/console/applications")
    assert 'href="/console/payments"' in html


async def test_the_filters_narrow_the_payments_at_an_address_that_can_be_shared(
    client: Client, shop: Shop, console: Client
) -> None:
    outlet = await second_shop(client, shop)
    wanted = await new_session(client, outlet, orderReference="A-1", customer={"email": "ann@example.com"})
    other_email = await new_session(client, shop, orderReference="A-1", customer={"email": "bob@example.com"})
    other_order = await new_session(client, shop, orderReference="B-2", customer={"email": "ann@example.com"})
    _, html = await page(console, "/console/payments?orderReference=A-1&customerEmail=ANN%40example.com")
    assert wanted in html and other_email not in html and other_order not in html
    assert 'value="A-1"' in html and 'value="ANN@example.com"' in html
    _, html = await page(console, f"/console/payments?applicationId={outlet.application_id}")
    assert wanted in html and other_email not in html and other_order not in html
    assert f'<option value="{outlet.application_id}" selected>' in html
    _, html = await page(console, "/console/payments?currency=PLN&amountMin=100&amountMax=100&status=PENDING")
    assert all(found in html for found in (wanted, other_email, other_order))
    response, html = await page(console, "/console/payments?orderReference=none")
    assert response.status_code == 200 and "No payment matches these filters." in html


async def test_a_filter_that_is_not_valid_is_400_with_a_field_error(shop: Shop, console: Client) -> None:
    response, html = await page(console, "/console/payments?amount=12&createdFrom=someday")
    assert response.status_code == 400
    assert 'id="currency-error"' in html and 'id="createdFrom-error"' in html
    assert 'aria-invalid="true"' in html


async def test_next_page_reads_the_page_after_the_last_one_shown(
    db: Database, shop: Shop, console: Client
) -> None:
    ids = await insert_sessions(db, shop, 30)
    _, html = await page(console, "/console/payments?currency=EUR")
    shown = [session_id for session_id in reversed(ids) if session_id in html]
    assert shown == list(reversed(ids))[:25]
    following = re.search(r'<a href="([^"]+)">Next page</a>', html)
    assert following is not None
    assert "currency=EUR" in unescape(following.group(1))
    _, html = await page(console, unescape(following.group(1)))
    assert [session_id for session_id in reversed(ids) if session_id in html] == list(reversed(ids))[25:]
    assert "First page" in html and "Next page" not in html


async def test_export_csv_streams_every_payment_the_filters_hold(
    client: Client, db: Database, shop: Shop, console: Client
) -> None:
    ids = await insert_sessions(db, shop, 30)
    await new_session(client, shop)  # PLN: not exported
    _, html = await page(console, "/console/payments?currency=EUR")
    link = re.search(r'<a href="([^"]+)" id="export-csv"', html)
    assert link is not None
    response = await console.get(unescape(link.group(1)))
    assert response.status_code == 200
    assert response.headers["Content-Disposition"] == 'attachment; filename="payments.csv"'
    rows = list(csv.DictReader(io.StringIO(await response.get_data(as_text=True))))
    assert [row["id"] for row in rows] == list(reversed(ids))
    assert {(row["amount"], row["currency"], row["customerEmail"]) for row in rows} == {
        ("5.00", "EUR", "many@example.com")
    }


async def add_delivery(db: Database, shop: Shop, session_id: str, attempted_at: datetime) -> None:
    """A webhook configuration and a delivery of the session's first event with one attempt
    answered 401, stored straight (the delivery loop's own work is pinned elsewhere)."""
    config, delivery = uuid.uuid4(), uuid.uuid4()

    async def insert(conn: Connection) -> None:
        await conn.execute(
            """INSERT INTO webhook_configs
                   (id, application_id, url, subscribed_events, secret, key_fingerprint)
               VALUES ($1, $2, 'https://shop.example/hooks', '{session.completed}', '\\x00', 'sha256:0')""",
            config,
            uuid.UUID(shop.application_id),
        )
        seq = await conn.fetchval(
            "SELECT min(seq) FROM outbox_events WHERE session_id = $1", uuid.UUID(session_id)
        )
        await conn.execute(
            """INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id, status,
                                               attempts, created_at)
               VALUES ($1, $2, $3, $4, $5, 'PENDING', 1, $6)""",
            delivery,
            config,
            uuid.UUID(shop.application_id),
            seq,
            uuid.UUID(session_id),
            attempted_at,
        )
        await conn.execute(
            """INSERT INTO webhook_attempts (delivery_id, attempted_at, status_code, latency_ms)
               VALUES ($1, $2, 401, 12)""",
            delivery,
            attempted_at,
        )

    await db.transaction(insert)


async def test_a_sessions_page_shows_its_customer_addresses_and_items_as_given(
    client: Client, shop: Shop, console: Client
) -> None:
    customer = {
        "email": "jan@example.com",
        "firstName": "Jan",
        "lastName": "Kowalski",
        "phone": "+48 600 700 800",
        "billingAddress": {"line1": "Prosta 1", "city": "Warszawa", "postalCode": "00-001", "country": "PL"},
        "shippingAddress": {"line1": "Długa 5", "city": "Kraków", "postalCode": "31-001", "country": "PL"},
    }
    items = [
        {"name": "Teapot", "sku": "TP-1", "quantity": 2, "unitPrice": Decimal("30.00")},
        {"name": "Cup", "quantity": 4, "unitPrice": Decimal("10.00")},
    ]
    session_id = await new_session(client, shop, customer=customer, orderItems=items)
    response, html = await page(console, f"/console/sessions/{session_id}")
    assert response.status_code == 200
    text = unescape(html)
    for shown in (
        "jan@example.com",
        "Jan Kowalski",
        "+48 600 700 800",
        "Prosta 1",
        "00-001 Warszawa",
        "Długa 5",
        "31-001 Kraków",
        "Teapot",
        "TP-1",
        "30.00 PLN",
        "60.00 PLN",
        "40.00 PLN",
    ):
        assert shown in text, shown


async def test_a_sessions_timeline_holds_its_attempts_refunds_events_and_deliveries_in_time_order(
    client: Client, db: Database, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    response = await post_json(
        client,
        f"/api/v1/sessions/{session_id}/refunds",
        {"amount": Decimal("30.00")},
        {**shop.headers, "Idempotency-Key": "r1"},
    )
    assert response.status_code in (201, 202)
    await record_when(client, shop, session_id, lambda record: record["refunds"][0]["status"] == "COMPLETED")
    await add_delivery(db, shop, session_id, datetime.now(UTC) + timedelta(hours=1))
    _, html = await page(console, f"/console/sessions/{session_id}")
    timeline = html[
        html.index('<ol class="timeline"') : html.index("</ol>", html.index('<ol class="timeline"'))
    ]
    kinds = re.findall(r'<li class="timeline-(\w+)">', timeline)
    assert kinds[0] == "session"
    assert kinds[-1] == "delivery"  # an hour after everything else
    text = unescape(timeline)
    order = [
        text.index("Session created for 100.00 PLN"),
        text.index("Attempt 1 opened at Sandbox"),
        text.index("Attempt 1 at Sandbox succeeded"),
        text.index("Refund of 30.00 PLN asked for"),
        text.index("Refund of 30.00 PLN completed"),
        text.index("session.completed sent to https://shop.example/hooks (attempt 1): HTTP 401"),
    ]
    assert order == sorted(order)
    assert "Event session.completed written" in text and "Event refund.completed written" in text
    times = re.findall(r'<time datetime="([^"]+)"', timeline)
    assert times == sorted(times)
