"""Reconciliation through the API, against the sandbox's own settlements (no account anywhere):
each outcome, the payouts' check, repair of a payment never reported, the bounds of a run, the CSV."""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.storage.database import Database
from payorch.storage.database_thread import on_database_thread
from tests.clock import ShiftedClock
from tests.helpers import (
    Client,
    Shop,
    create_session,
    eventually,
    new_application,
    new_shop,
    post_json,
    session_body,
)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The sandbox settles the day it is paid (no lag), and its refunds complete after a minute, so a
    test sees a refund settled while payorch still has it PENDING; access tokens outlive the hours
    a test moves time by."""
    sandbox = SandboxSettings(settlement_lag_days=0, refund_delay_ms=60_000)
    auth = settings.auth.model_copy(update={"jwt_ttl_s": 24 * 3600})
    return settings.model_copy(update={"providers": ProviderSettings(sandbox=sandbox), "auth": auth})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def today(clock: ShiftedClock) -> str:
    return clock.now().astimezone(UTC).date().isoformat()


async def pay(client: Client, shop: Shop, card: str = "4242424242424242", total: str = "100.00") -> str:
    """A session paid at the sandbox with `card`; its id (the session may stay PENDING at payorch)."""
    response = await create_session(client, shop, f"pay-{uuid.uuid4()}", session_body(total=total))
    created = await response.get_json()
    paid = await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": card})
    assert paid.status_code == 200
    return str(created["sessionId"])


async def status_of(client: Client, shop: Shop, session_id: str) -> str:
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    return str((await response.get_json())["status"])


async def paid_session(client: Client, shop: Shop, card: str = "4242424242424242") -> str:
    session_id = await pay(client, shop, card)

    async def succeeded() -> bool:
        return await status_of(client, shop, session_id) == "SUCCEEDED"

    await eventually(succeeded)
    return session_id


async def reconcile(client: Client, shop: Shop, first: str, last: str | None = None) -> dict[str, Any]:
    """Start a run over `first` to `last` and answer it once it ended."""
    path = f"/api/v1/applications/{shop.application_id}/reconciliations"
    started = await post_json(
        client, path, {"provider": "sandbox", "from": first, "to": last or first}, shop.merchant.headers
    )
    assert started.status_code == 202, await started.get_data(as_text=True)
    run_id = (await started.get_json())["id"]

    async def ended() -> dict[str, Any] | None:
        response = await client.get(f"{path}/{run_id}?limit=100", headers=shop.merchant.headers)
        body: dict[str, Any] = await exact_json(response)
        return body if body["status"] != "RUNNING" else None

    run = await eventually(ended)
    assert run["status"] == "COMPLETED", run
    return run


async def exact_json(response: Any) -> Any:
    """The body with its numbers as the API wrote them (Decimal, not float)."""
    return json.loads(await response.get_data(as_text=True), parse_float=Decimal)


def outcomes(run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for item in run["items"]["items"]:
        found.setdefault(item["outcome"], []).append(item)
    return found


async def test_every_paid_session_settled_in_full_is_matched(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    first, second = await paid_session(client, shop), await paid_session(client, shop)
    run = await reconcile(client, shop, today(clock))
    assert {item["sessionId"] for item in run["items"]["items"]} == {first, second}
    assert {item["outcome"] for item in run["items"]["items"]} == {"MATCHED"}
    assert run["counts"]["MATCHED"] == 2
    # card: 1.4% + 0.25 PLN of 100.00 PLN = 1.65 PLN each (`providers.sandbox.settlement_fees`).
    item = run["items"]["items"][0]
    assert (item["gross"], item["fee"], item["net"]) == (Decimal("100.00"), Decimal("1.65"), Decimal("98.35"))
    assert run["totals"] == [
        {
            "currency": "PLN",
            "items": 2,
            "gross": Decimal("200.00"),
            "fee": Decimal("3.30"),
            "net": Decimal("196.70"),
        }
    ]
    assert [payout["matches"] for payout in run["payouts"]] == [True]
    assert run["payouts"][0]["amount"] == Decimal("196.70")


async def test_a_payment_settled_short_is_an_amount_mismatch(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    session_id = await paid_session(client, shop, "4000000000000077")
    run = await reconcile(client, shop, today(clock))
    [item] = outcomes(run)["AMOUNT_MISMATCH"]
    assert item["sessionId"] == session_id
    assert (item["gross"], item["recorded"]) == (Decimal("99.00"), Decimal("100.00"))


async def test_a_payment_paid_but_never_settled_is_missing_at_the_provider(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    session_id = await paid_session(client, shop, "4000000000000119")
    run = await reconcile(client, shop, today(clock))
    [item] = outcomes(run)["MISSING_AT_PROVIDER"]
    assert (item["sessionId"], item["recorded"], item["gross"]) == (session_id, Decimal("100.00"), None)


async def test_a_refund_settled_while_payorch_has_it_pending_is_a_status_mismatch(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    session_id = await paid_session(client, shop)
    response = await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", {}, {**shop.headers, "Idempotency-Key": "refund-1"}
    )
    refund_id = (await response.get_json())["refundId"]
    run = await reconcile(client, shop, today(clock))
    [item] = outcomes(run)["STATUS_MISMATCH"]
    assert (item["refundId"], item["kind"], item["gross"]) == (refund_id, "REFUND", Decimal("-100.00"))
    assert [i["sessionId"] for i in outcomes(run)["MATCHED"]] == [session_id]


async def test_a_payout_one_minor_unit_short_does_not_match_its_items(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop, "4000000000000093")
    run = await reconcile(client, shop, today(clock))
    assert outcomes(run).keys() == {"MATCHED"}
    [payout] = run["payouts"]
    assert (payout["amount"], payout["itemsNet"], payout["matches"]) == (
        Decimal("98.34"),
        Decimal("98.35"),
        False,
    )


async def test_a_payout_of_rounded_fees_a_short_settlement_and_a_refund_matches_its_items(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    # The payout is summed in PostgreSQL, the items in Python: each rule of the sandbox's
    # settlement once in one payout. 1.4% of 12.50 PLN is 17.5 grosze, rounded half up to 18.
    odd = await pay(client, shop, total="12.50")
    await paid_session(client, shop, "4000000000000077")  # settled 1% short
    refunded = await paid_session(client, shop)
    response = await post_json(
        client, f"/api/v1/sessions/{refunded}/refunds", {}, {**shop.headers, "Idempotency-Key": "refund-1"}
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    run = await reconcile(client, shop, today(clock))
    [fee] = [
        item["fee"]
        for item in run["items"]["items"]
        if item["sessionId"] == odd and item["kind"] == "PAYMENT"
    ]
    assert fee == Decimal("0.43")  # 0.18 + 0.25
    assert len(run["items"]["items"]) == 4
    [payout] = run["payouts"]
    assert payout["matches"] is True
    assert payout["amount"] == payout["itemsNet"] == sum(item["net"] for item in run["items"]["items"])


async def test_a_payment_settled_but_never_reported_heals_its_session_once(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    session_id = await pay(client, shop, "4000000000000341")
    assert await status_of(client, shop, session_id) == "PENDING"
    run = await reconcile(client, shop, today(clock))
    [item] = outcomes(run)["MISSING_IN_PAYORCH"]
    assert (item["sessionId"], item["repaired"]) == (session_id, True)
    assert run["repaired"] == 1
    assert await status_of(client, shop, session_id) == "SUCCEEDED"
    metrics = await (await client.get("/metrics")).get_data(as_text=True)
    assert 'payorch_reconciliation_repairs_total{provider="sandbox"} 1.0' in metrics
    assert (
        'payorch_reconciliation_items_total{outcome="MISSING_IN_PAYORCH",provider="sandbox"} 1.0' in metrics
    )
    assert await completed_events(db, session_id) == 1
    # A second run finds it paid, and repairs nothing again.
    again = await reconcile(client, shop, today(clock))
    assert outcomes(again).keys() == {"MATCHED"}
    assert await completed_events(db, session_id) == 1


async def test_the_providers_event_arriving_after_a_repair_changes_nothing(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    session_id = await pay(client, shop, "4000000000000341")
    await reconcile(client, shop, today(clock))
    await db.transaction(_queue_paid_event_late, session_id, clock.now())

    async def delivered() -> bool:
        return bool(await db.autocommit(_late_event_delivered, session_id))

    await eventually(delivered)
    assert await status_of(client, shop, session_id) == "SUCCEEDED"
    assert await completed_events(db, session_id) == 1


async def test_a_completed_run_sends_its_counts_to_configurations_that_subscribe(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    webhooks = f"/api/v1/applications/{shop.application_id}/webhooks"
    subscribed = await post_json(
        client,
        webhooks,
        {"url": "https://127.0.0.1:9/recon", "subscribedEvents": ["reconciliation.completed"]},
        shop.merchant.headers,
    )
    default = await post_json(client, webhooks, {"url": "https://127.0.0.1:9/all"}, shop.merchant.headers)
    assert subscribed.status_code == default.status_code == 201
    await paid_session(client, shop, "4000000000000077")
    run = await reconcile(client, shop, today(clock))
    [payload] = await db.autocommit(
        _events_of_type, uuid.UUID(shop.application_id), "reconciliation.completed"
    )
    assert payload["data"]["reconciliationId"] == run["id"]
    assert payload["data"]["counts"]["AMOUNT_MISMATCH"] == 1
    assert payload["data"]["period"] == {"from": today(clock), "to": today(clock)}

    async def fanned_out() -> list[str] | None:
        found = await db.autocommit(_configs_delivered, payload["id"])
        return found or None

    subscribed_id = (await subscribed.get_json())["id"]
    assert await eventually(fanned_out) == [subscribed_id]


async def test_a_period_with_nothing_completes_empty(client: Client, shop: Shop) -> None:
    run = await reconcile(client, shop, "2024-01-01", "2024-01-31")
    assert run["items"]["items"] == [] and run["totals"] == [] and run["payouts"] == []
    assert set(run["counts"].values()) == {0}


async def test_a_second_run_of_the_account_while_one_runs_is_409(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations"
    body = {"provider": "sandbox", "from": today(clock), "to": today(clock)}
    await db.autocommit(_running_run, uuid.UUID(shop.application_id), clock.now())
    response = await post_json(client, path, body, shop.merchant.headers)
    assert response.status_code == 409
    assert (await response.get_json())["code"] == 409


async def test_a_run_abandoned_an_hour_ago_no_longer_holds_the_account(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock
) -> None:
    await db.autocommit(_running_run, uuid.UUID(shop.application_id), clock.now())
    clock.advance(3601)
    run = await reconcile(client, shop, today(clock))
    listed = await (
        await client.get(
            f"/api/v1/applications/{shop.application_id}/reconciliations", headers=shop.merchant.headers
        )
    ).get_json()
    assert [item["status"] for item in listed["items"]] == ["COMPLETED", "FAILED"]
    assert listed["items"][0]["id"] == run["id"]
    assert listed["items"][1]["error"].startswith("abandoned")


async def test_another_merchants_payments_are_never_in_a_run(
    client: Client, shop: Shop, db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    # Both shops link the same sandbox key: one sandbox account, two applications.
    other = await new_shop(client, db, settings)
    theirs = await paid_session(client, other)
    ours = await paid_session(client, shop)
    run = await reconcile(client, shop, today(clock))
    sessions = {item["sessionId"] for item in run["items"]["items"]}
    assert ours in sessions and theirs not in sessions
    [foreign] = outcomes(run)["MISSING_IN_PAYORCH"]
    assert foreign["repaired"] is False
    assert await status_of(client, other, theirs) == "SUCCEEDED"
    response = await client.get(
        f"/api/v1/applications/{other.application_id}/reconciliations", headers=shop.merchant.headers
    )
    assert response.status_code == 403


async def test_the_csv_parses_back_to_the_same_items(client: Client, shop: Shop, clock: ShiftedClock) -> None:
    await paid_session(client, shop)
    await paid_session(client, shop, "4000000000000077")
    run = await reconcile(client, shop, today(clock))
    path = f"/api/v1/applications/{shop.application_id}/reconciliations/{run['id']}"
    response = await client.get(path, headers={**shop.merchant.headers, "Accept": "text/csv"})
    assert response.status_code == 200
    assert response.content_type.startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(await response.get_data(as_text=True))))
    assert rows == [{key: _csv_text(value) for key, value in item.items()} for item in run["items"]["items"]]


async def test_items_filter_by_outcome(client: Client, shop: Shop, clock: ShiftedClock) -> None:
    await paid_session(client, shop)
    await paid_session(client, shop, "4000000000000077")
    run = await reconcile(client, shop, today(clock))
    path = f"/api/v1/applications/{shop.application_id}/reconciliations/{run['id']}?outcome=AMOUNT_MISMATCH"
    body = await (await client.get(path, headers=shop.merchant.headers)).get_json()
    assert [item["outcome"] for item in body["items"]["items"]] == ["AMOUNT_MISMATCH"]
    assert body["items"]["totalItems"] == 1


async def test_an_api_key_cannot_start_a_run(client: Client, shop: Shop, clock: ShiftedClock) -> None:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations"
    body = {"provider": "sandbox", "from": today(clock), "to": today(clock)}
    response = await post_json(client, path, body, shop.headers)
    assert response.status_code == 401
    listed = await client.get(path, headers=shop.headers)
    assert listed.status_code == 401


async def test_a_provider_not_linked_is_404(client: Client, shop: Shop) -> None:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations"
    body = {"provider": "stripe", "from": "2024-01-01", "to": "2024-01-01"}
    response = await post_json(client, path, body, shop.merchant.headers)
    assert response.status_code == 404


async def test_an_unknown_outcome_filter_is_400(client: Client, shop: Shop, clock: ShiftedClock) -> None:
    run = await reconcile(client, shop, today(clock))
    path = f"/api/v1/applications/{shop.application_id}/reconciliations/{run['id']}?outcome=LOST"
    assert (await client.get(path, headers=shop.merchant.headers)).status_code == 400


async def test_another_applications_run_is_404(
    client: Client, shop: Shop, db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    run = await reconcile(client, shop, today(clock))
    other = await new_application(client, shop.merchant, "Other")
    path = f"/api/v1/applications/{other['id']}/reconciliations/{run['id']}"
    assert (await client.get(path, headers=shop.merchant.headers)).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"provider": "sandbox", "from": "2024-02-02", "to": "2024-02-01"}, "to"),
        ({"provider": "sandbox", "from": "2024-01-01", "to": "2024-12-31"}, "to"),
        ({"provider": "sandbox", "from": "2999-01-01", "to": "2999-01-01"}, "from"),
        ({"provider": "sandbox", "from": "yesterday", "to": "2024-01-01"}, "from"),
        ({"provider": "sandbox", "from": "2024-02-30", "to": "2024-03-01"}, "from"),
        ({"provider": "sandbox", "from": 1704067200, "to": "2024-01-01"}, "from"),
    ],
)
async def test_a_bad_period_is_400_and_starts_nothing(
    client: Client, shop: Shop, body: dict[str, Any], field: str
) -> None:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations"
    response = await post_json(client, path, body, shop.merchant.headers)
    assert response.status_code == 400
    answer = await response.get_json()
    assert field in str(answer.get("details")), answer
    listed = await (await client.get(path, headers=shop.merchant.headers)).get_json()
    assert listed["items"] == []


def _csv_text(value: Any) -> str:
    if value is None:
        return ""
    return str(value)


async def completed_events(db: Database, session_id: str) -> int:
    return int(await db.autocommit(_completed_events, uuid.UUID(session_id)))


@on_database_thread
async def _completed_events(conn: Any, session_id: uuid.UUID) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM outbox_events WHERE session_id = $1 AND type = 'session.completed'",
            session_id,
        )
    )


@on_database_thread
async def _running_run(conn: Any, application_id: uuid.UUID, now: datetime) -> None:
    await conn.execute(
        """INSERT INTO reconciliation_runs
               (id, application_id, provider, first_day, last_day, state, created_at)
           VALUES ($1, $2, 'sandbox', $3, $3, 'RUNNING', $4)""",
        uuid.uuid4(),
        application_id,
        now.date(),
        now,
    )


@on_database_thread
async def _queue_paid_event_late(conn: Any, session_id: str, now: datetime) -> None:
    """The sandbox announces the payment after all, as a provider's delayed event."""
    from payorch.providers.sandbox import simulator
    from payorch.storage import sandbox as store

    checkout_id = await conn.fetchval(
        "SELECT id FROM sandbox_checkouts WHERE client_reference = $1", session_id
    )
    checkout = await store.lock_checkout(conn, checkout_id)
    await simulator._queue(
        conn, checkout, simulator.EventType.CHECKOUT_PAID, simulator._checkout_data(checkout), now=now
    )


@on_database_thread
async def _late_event_delivered(conn: Any, session_id: str) -> bool:
    return bool(
        await conn.fetchval(
            """SELECT bool_and(d.delivered_at IS NOT NULL) FROM sandbox_deliveries d
               JOIN sandbox_events e ON e.id = d.event_id
               JOIN sandbox_checkouts c ON c.id = e.checkout_id
               WHERE c.client_reference = $1 AND e.type = 'checkout.paid'""",
            session_id,
        )
    )


@on_database_thread
async def _events_of_type(conn: Any, application_id: uuid.UUID, event_type: str) -> list[Any]:
    rows = await conn.fetch(
        "SELECT payload FROM outbox_events WHERE application_id = $1 AND type = $2",
        application_id,
        event_type,
    )
    return [json.loads(row["payload"]) if isinstance(row["payload"], str) else row["payload"] for row in rows]


@on_database_thread
async def _configs_delivered(conn: Any, event_id: str) -> list[str]:
    rows = await conn.fetch(
        """SELECT d.config_id FROM webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
           WHERE e.id = $1""",
        event_id,
    )
    return [str(row["config_id"]) for row in rows]
