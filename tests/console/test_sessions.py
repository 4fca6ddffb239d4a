"""The console's sessions: the list and its filters, a session's page with its refunds and events, and
the refund form, which refunds through the API's own operation, once per rendered form."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage import outbox
from payorch.storage import sessions as sessions_store
from payorch.storage.database import Connection, Database
from payorch.storage.next_attempt import AttemptEnding, NextAttempt, open_next_attempt
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.statuses import AttemptStatus, FailureReason, RoutingReason
from tests.console.helpers import csrf_of, page, signed_in_browser
from tests.helpers import Client, Shop, create_session, lose_dispute, new_shop, post_json, session_body
from tests.http.test_refunds import paid_session, record_of, record_when

_KEY = re.compile(r'name="idempotency_key" value="([^"]+)"')


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


@pytest.fixture
async def console(app: PayorchApp, shop: Shop) -> Client:
    """The shop's admin, signed in to the console."""
    browser, _ = await signed_in_browser(app, shop.merchant.email)
    return browser


async def pending_session(client: Client, shop: Shop, total: str = "12.30") -> str:
    response = await create_session(client, shop, f"k-{uuid.uuid4()}", session_body(total=total))
    assert response.status_code == 201, await response.get_data(as_text=True)
    return str((await response.get_json())["sessionId"])


async def created_on(db: Database, session_id: str, moment: datetime) -> None:
    async def backdate(conn: Connection) -> None:
        await conn.execute(
            "UPDATE checkout_sessions SET created_at = $2 WHERE id = $1", uuid.UUID(session_id), moment
        )

    await db.transaction(backdate)


async def refund_form(console: Client, session_id: str, **fields: str) -> dict[str, str]:
    """The refund form of the session's page as the browser would send it: its hidden fields, and
    `fields` as filled in."""
    response, html = await page(console, f"/console/sessions/{session_id}")
    assert response.status_code == 200, html
    found = _KEY.search(html)
    assert found is not None, html
    return {"csrf_token": csrf_of(html), "idempotency_key": found.group(1), **fields}


async def send_refund(console: Client, session_id: str, form: dict[str, str]) -> Any:
    """The refund form's confirmation sent: the review's own form, `confirmed` (see
    `test_the_form_refunds_nothing_until_its_amount_currency_and_session_are_confirmed`)."""
    return await console.post(f"/console/sessions/{session_id}/refunds", form={**form, "confirmed": "yes"})


async def review_refund(console: Client, session_id: str, form: dict[str, str]) -> Any:
    """The refund form sent as typed: its review."""
    return await console.post(f"/console/sessions/{session_id}/refunds", form=form)


async def refunds_of(client: Client, shop: Shop, session_id: str) -> list[dict[str, Any]]:
    refunds: list[dict[str, Any]] = (await record_of(client, shop, session_id))["refunds"] or []
    return refunds


# --- The list ----------------------------------------------------------------------------------


async def test_the_list_shows_the_applications_sessions_newest_first(
    client: Client, db: Database, settings: Settings, shop: Shop, console: Client
) -> None:
    older = await paid_session(client, shop, total="100.00")
    newer = await pending_session(client, shop, total="12.30")
    elsewhere = await new_shop(client, db, settings)
    not_yours = await pending_session(client, elsewhere)
    response, html = await page(console, f"/console/applications/{shop.application_id}/sessions")
    assert response.status_code == 200
    assert html.index(newer) < html.index(older)
    assert f'href="/console/sessions/{older}"' in html
    for shown in (
        "100.00 PLN",
        "12.30 PLN",
        "SUCCEEDED",
        "PENDING",
        "sandbox",
        'aria-current="page">Sessions',
    ):
        assert shown in html, shown
    assert not_yours not in html


async def test_the_list_filters_by_status_and_by_the_day_of_creation(
    client: Client, db: Database, shop: Shop, console: Client
) -> None:
    paid = await paid_session(client, shop)
    pending = await pending_session(client, shop)
    january = await pending_session(client, shop)
    await created_on(db, january, datetime(2024, 1, 10, 23, 59, tzinfo=UTC))
    path = f"/console/applications/{shop.application_id}/sessions"

    _, html = await page(console, f"{path}?status=SUCCEEDED")
    assert paid in html and pending not in html and january not in html
    assert '<option value="SUCCEEDED" selected>' in html

    _, html = await page(console, f"{path}?status=PENDING&from=2024-01-10&to=2024-01-10")
    assert january in html and pending not in html and paid not in html

    _, html = await page(console, f"{path}?from=2024-01-11")
    assert january not in html and pending in html and paid in html

    response, html = await page(console, f"{path}?to=2024-01-09")
    assert response.status_code == 200
    assert "No session matches these filters." in html


async def test_the_pages_of_a_filtered_list_keep_the_filters(
    client: Client, shop: Shop, console: Client
) -> None:
    for _ in range(21):
        await pending_session(client, shop)
    await paid_session(client, shop)
    path = f"/console/applications/{shop.application_id}/sessions"
    _, html = await page(console, f"{path}?status=PENDING&from=2020-01-01")
    assert "21 sessions matching the filters" in html
    assert f'href="{path}?status=PENDING&amp;from=2020-01-01&amp;page=2">Older</a>' in html
    _, html = await page(console, f"{path}?status=PENDING&from=2020-01-01&page=2")
    assert html.count('href="/console/sessions/') == 1
    assert f'href="{path}?status=PENDING&amp;from=2020-01-01">Newer</a>' in html


async def test_a_bad_date_or_status_filter_is_400_with_a_field_error(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await pending_session(client, shop)
    path = f"/console/applications/{shop.application_id}/sessions"
    for query, field in (
        ("from=2024-13-01", "from"),
        ("to=yesterday", "to"),
        ("status=PAID", "status"),
        ("from=2024-02-02&to=2024-02-01", "to"),
    ):
        response, html = await page(console, f"{path}?{query}")
        assert response.status_code == 400, query
        assert f'id="{field}-error"' in html, query
        assert 'aria-invalid="true"' in html
        assert session_id not in html


# --- A session's page --------------------------------------------------------------------------


async def test_a_sessions_page_shows_its_record_refunds_and_events(
    client: Client, db: Database, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    response = await post_json(
        client,
        f"/api/v1/sessions/{session_id}/refunds",
        {"amount": Decimal("30.00"), "reason": "DUPLICATE"},
        {**shop.headers, "Idempotency-Key": "r1"},
    )
    refund_id = (await response.get_json())["refundId"]
    await record_when(client, shop, session_id, lambda record: record["refunds"][0]["status"] == "COMPLETED")
    response, html = await page(console, f"/console/sessions/{session_id}")
    assert response.status_code == 200
    for shown in ("PARTIALLY_REFUNDED", "100.00 PLN", "30.00 PLN", "70.00 PLN", "Duplicate", "COMPLETED"):
        assert shown in html, shown
    assert refund_id in html
    events = await db.autocommit(outbox.events_of_session, uuid.UUID(session_id))
    assert [event["type"] for event in events] == ["session.completed", "refund.completed"]
    # Newest first in the events' table (the timeline above it runs oldest first).
    table = html[html.index('id="events"') :]
    assert table.index(events[1]["id"]) < table.index(events[0]["id"])
    assert table.index("refund.completed") < table.index("session.completed")


async def test_a_pending_session_has_no_refund_form(client: Client, shop: Shop, console: Client) -> None:
    session_id = await pending_session(client, shop)
    response, html = await page(console, f"/console/sessions/{session_id}")
    assert response.status_code == 200
    assert "idempotency_key" not in html
    assert "A pending session was not paid, so it cannot be refunded." in html


_ATTEMPT_ROW = re.compile(r'<tr id="attempt-([0-9]+)">(.*?)</tr>', re.DOTALL)


def attempt_rows(html: str) -> list[tuple[int, str]]:
    """The rows of the page's attempts, as they come: each one's number and its cells' text."""
    return [
        (int(number), " ".join(re.sub(r"<[^>]+>", "", cells).split()))
        for number, cells in _ATTEMPT_ROW.findall(html)
    ]


async def test_a_paid_sessions_page_shows_its_one_attempt(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    [attempt] = (await record_of(client, shop, session_id))["attempts"]
    _, html = await page(console, f"/console/sessions/{session_id}")
    assert "1 attempt, oldest first" in html
    [(number, cells)] = attempt_rows(html)
    assert number == 1
    assert cells.startswith(f"1 Sandbox Succeeded {attempt['reason'].capitalize()} ")
    assert f'<time datetime="{attempt["createdAt"]}"' in html
    assert f'<time datetime="{attempt["endedAt"]}"' in html


async def test_a_sessions_page_shows_a_declined_attempt_then_the_next_oldest_first(
    client: Client, db: Database, shop: Shop, console: Client
) -> None:
    session_id = await pending_session(client, shop)
    stored = await db.autocommit(sessions_store.get_session, uuid.UUID(session_id))
    assert stored is not None and stored.provider_name and stored.provider_reference
    ending = AttemptEnding(
        provider_name=stored.provider_name,
        provider_reference=stored.provider_reference,
        status=AttemptStatus.DECLINED,
        failure_reason=FailureReason.INSUFFICIENT_FUNDS,
        provider_code="<b>51</b>",  # the provider's text, shown escaped
    )
    following = NextAttempt(
        provider_name="stripe",
        provider_reference="cs_test_next",
        checkout_url="https://checkout.stripe.example/c/pay/cs_test_next",
        routing_score=Decimal("0.8000"),
        routing_rule=None,
        routing_reason=RoutingReason.RECOVERY,
        routing_version=0,
    )
    opened = await db.transaction(
        open_next_attempt,
        application_id=uuid.UUID(shop.application_id),
        session_id=stored.id,
        ending=ending,
        next_attempt=following,
        now=SYSTEM_CLOCK.now(),
    )
    assert opened is not None
    declined, current = (await record_of(client, shop, session_id))["attempts"]

    _, html = await page(console, f"/console/sessions/{session_id}")

    assert "2 attempts, oldest first" in html
    assert [number for number, _ in attempt_rows(html)] == [1, 2]
    (_, first), (_, second) = attempt_rows(html)
    assert first.startswith("1 Sandbox Declined (Insufficient funds) code &lt;b&gt;51&lt;/b&gt; ")
    assert "<b>51</b>" not in html
    assert second.startswith("2 Stripe Open Recovery ")
    assert second.endswith("—")  # still open: not ended
    assert '<span title="INSUFFICIENT_FUNDS">Insufficient funds</span>' in html
    assert f'<time datetime="{declined["endedAt"]}"' in html
    assert current["createdAt"] == declined["endedAt"]


# --- Refunds -----------------------------------------------------------------------------------


async def test_half_a_refund_through_the_form_makes_one_refund_of_half(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="50.00", reason="REQUESTED_BY_CUSTOMER")
    response = await send_refund(console, session_id, form)
    assert response.status_code == 303, await response.get_data(as_text=True)
    (refund,) = await refunds_of(client, shop, session_id)
    assert refund["amount"] == Decimal("50.00")
    assert refund["reason"] == "REQUESTED_BY_CUSTOMER"
    assert (await record_of(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"
    location = response.headers["Location"]
    assert location.startswith(f"/console/sessions/{session_id}?refund={refund['id']}")
    _, html = await page(console, location.split("#")[0])
    assert "Refund of 50.00 PLN requested" in html
    assert refund["id"] in html
    assert "Requested by customer" in html


async def test_the_whole_that_remains_refunded_leaves_no_form(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop, total="0.30")
    form = await refund_form(console, session_id, amount="0.30", reason="")
    response = await send_refund(console, session_id, form)
    assert response.status_code == 303
    (refund,) = await refunds_of(client, shop, session_id)
    assert (refund["amount"], refund["reason"]) == (Decimal("0.30"), None)
    _, html = await page(console, f"/console/sessions/{session_id}")
    assert "idempotency_key" not in html  # nothing remains to refund: no form
    assert "Nothing remains to be refunded." in html


async def test_the_form_refunds_nothing_until_its_amount_currency_and_session_are_confirmed(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    _, html = await page(console, f"/console/sessions/{session_id}")
    assert re.search(r'<input type="text" id="amount" name="amount" value=""', html)  # typed, not prefilled
    form = await refund_form(console, session_id, amount="25.00", reason="REQUESTED_BY_CUSTOMER")
    review = await review_refund(console, session_id, form)
    html = await review.get_data(as_text=True)
    assert review.status_code == 200, html
    assert await refunds_of(client, shop, session_id) == []  # nothing refunded by the review
    said = " ".join(
        unescape(re.sub(r"<[^>]+>", "", html.split('id="refund-confirm-text">')[1].split("</p>")[0])).split()
    )
    assert said.startswith("Refund 25.00 PLN of session order-1001 (")
    assert session_id in said and "75.00 PLN will remain" in said
    assert f'name="idempotency_key" value="{form["idempotency_key"]}"' in html  # the same key
    assert 'name="confirmed" value="yes"' in html
    confirmed = await send_refund(console, session_id, form)
    assert confirmed.status_code == 303
    (refund,) = await refunds_of(client, shop, session_id)
    assert refund["amount"] == Decimal("25.00")


async def test_a_review_of_more_than_remains_is_400_naming_the_amount(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="100.01", reason="")
    review = await review_refund(console, session_id, form)
    html = await review.get_data(as_text=True)
    assert review.status_code == 400
    assert "at most 100.00 PLN remains to refund" in html
    assert "refund-confirm-text" not in html


async def test_the_same_form_sent_twice_refunds_once(client: Client, shop: Shop, console: Client) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="10.00", reason="")
    first = await send_refund(console, session_id, form)
    second = await send_refund(console, session_id, form)
    assert (first.status_code, second.status_code) == (303, 303)
    (refund,) = await refunds_of(client, shop, session_id)
    assert f"refund={refund['id']}" in first.headers["Location"]
    assert f"refund={refund['id']}&again=1" in second.headers["Location"]
    _, html = await page(console, second.headers["Location"].split("#")[0])
    assert "This form was already sent" in html
    # A new rendering of the page is a new form: it refunds again.
    again = await refund_form(console, session_id, amount="10.00", reason="")
    assert (await send_refund(console, session_id, again)).status_code == 303
    assert len(await refunds_of(client, shop, session_id)) == 2


async def test_a_double_click_sending_the_form_twice_at_once_refunds_once(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="10.00", reason="")
    statuses: list[int] = []

    async def click() -> None:
        statuses.append((await send_refund(console, session_id, form)).status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(click)
        nursery.start_soon(click)
    assert 303 in statuses and set(statuses) <= {303, 409}, statuses
    (refund,) = await refunds_of(client, shop, session_id)
    assert refund["amount"] == Decimal("10.00")


async def test_a_refund_over_what_remains_is_refused_with_the_message_and_refunds_nothing(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    first = await refund_form(console, session_id, amount="60.00", reason="")
    assert (await send_refund(console, session_id, first)).status_code == 303
    form = await refund_form(console, session_id, amount="40.01", reason="")
    response = await send_refund(console, session_id, form)
    html = await response.get_data(as_text=True)
    assert response.status_code == 422
    assert "the refund exceeds the remaining refundable balance of the session" in html
    assert 'value="40.01"' in html  # the form shown again as it was sent
    assert form["idempotency_key"] not in html  # with a new key
    (refund,) = await refunds_of(client, shop, session_id)
    assert refund["amount"] == Decimal("60.00")
    assert (await record_of(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"


async def test_a_refunded_session_refuses_another_refund_with_the_message(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="100.00", reason="")
    assert (await send_refund(console, session_id, form)).status_code == 303
    again = {**form, "idempotency_key": f"another-{uuid.uuid4()}", "amount": "1.00"}
    response = await send_refund(console, session_id, again)
    assert response.status_code == 422
    assert "Nothing was refunded" in await response.get_data(as_text=True)
    assert len(await refunds_of(client, shop, session_id)) == 1


async def test_a_bad_amount_is_400_with_a_field_error_and_refunds_nothing(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, reason="")
    for amount in ("12,50", "1.234", "0", "-5", "", "1e3", "100.01"):
        for send in (review_refund, send_refund):
            response = await send(console, session_id, {**form, "amount": amount})
            html = await response.get_data(as_text=True)
            assert response.status_code == (422 if (amount, send) == ("100.01", send_refund) else 400), (
                amount,
                html,
            )
            if response.status_code == 400:
                assert 'id="amount-error"' in html, amount
                assert 'aria-describedby="amount-hint amount-error"' in html
    response = await send_refund(console, session_id, {**form, "amount": "1", "reason": "BORED"})
    assert response.status_code == 400
    assert 'id="reason-error"' in await response.get_data(as_text=True)
    assert await refunds_of(client, shop, session_id) == []


async def test_another_merchants_session_is_404_and_is_not_refunded(
    app: PayorchApp, client: Client, db: Database, settings: Settings, shop: Shop
) -> None:
    session_id = await paid_session(client, shop)
    attacker = await new_shop(client, db, settings)
    console, csrf = await signed_in_browser(app, attacker.merchant.email)
    response, html = await page(console, f"/console/sessions/{session_id}")
    assert response.status_code == 404
    assert "order-1001" not in html and "100.00" not in html
    form = {"csrf_token": csrf, "idempotency_key": "attack", "amount": "100.00", "reason": ""}
    response = await send_refund(console, session_id, form)
    assert response.status_code == 404
    html = await response.get_data(as_text=True)
    assert "No such session" in html
    assert "100.00" not in html
    # Nor under the attacker's own application.
    response, _ = await page(console, f"/console/applications/{shop.application_id}/sessions")
    assert response.status_code == 404
    for nothing in ("not-a-uuid", str(uuid.uuid4())):
        assert (await page(console, f"/console/sessions/{nothing}"))[0].status_code == 404
    assert await refunds_of(client, shop, session_id) == []
    assert (await record_of(client, shop, session_id))["status"] == "SUCCEEDED"


async def test_a_refund_of_a_session_whose_provider_is_no_longer_linked_says_so_and_refunds_nothing(
    client: Client, db: Database, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="100.00", reason="")

    async def unlink(conn: Connection) -> None:
        await conn.execute(
            "DELETE FROM provider_configs WHERE application_id = $1", uuid.UUID(shop.application_id)
        )

    await db.transaction(unlink)
    response = await send_refund(console, session_id, form)
    html = await response.get_data(as_text=True)
    assert response.status_code == 404
    assert "Not refunded" in html
    assert "the provider of this session is no longer linked" in html
    assert await refunds_of(client, shop, session_id) == []


async def test_a_refund_without_the_csrf_token_is_403_and_refunds_nothing(
    client: Client, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    form = await refund_form(console, session_id, amount="100.00", reason="")
    for token in ("", "0" * 64):
        sent = {**form, "csrf_token": token}
        response = await send_refund(console, session_id, sent)
        assert response.status_code == 403
    response = await send_refund(console, session_id, {"idempotency_key": form["idempotency_key"]})
    assert response.status_code == 403
    assert await refunds_of(client, shop, session_id) == []


async def test_a_session_whose_dispute_was_lost_shows_when_on_its_page(
    app: PayorchApp, client: Client, db: Database, shop: Shop, console: Client
) -> None:
    session_id = await paid_session(client, shop)
    _, html = await page(console, f"/console/sessions/{session_id}")
    assert "Dispute lost" not in html

    await lose_dispute(app, db, shop, session_id)
    lost_at = (await record_of(client, shop, session_id))["disputeLostAt"]
    _, html = await page(console, f"/console/sessions/{session_id}")
    assert f'<dt>Dispute lost</dt><dd><time datetime="{lost_at}" title="{lost_at}">' in html
    assert '<span title="REVERSED">Reversed</span>' in html
    assert "Nothing remains to be refunded: the payment was reversed." in html
