"""PayU's OAuth tokens and orders through payorch's own app, against the fake PayU: one token per
account kept until shortly before its `expires_in`, fetched again on a 401 and once for concurrent
creates, never logged; a create retried after a crash finds the order its lost answer left; one
merchant's rejected credentials close PayU for that merchant only."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.engine.idempotency import request_fingerprint
from payorch.engine.provider_health import Circuit
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.runtime import Runtime
from payorch.storage import idempotency_keys
from payorch.storage.database import Database
from tests import fake_payu as payu_fake
from tests.clock import ShiftedClock
from tests.fake_payu import ORDERS, FakePayu
from tests.helpers import (
    Client,
    Shop,
    account_figures,
    create_session,
    new_api_key,
    new_application,
    new_merchant,
    session_body,
)
from tests.providers import payu_support
from tests.providers.api_support import created, health_account, record
from tests.providers.payu_support import (
    CLIENT_SECRET,
    POS_ID,
    SECOND_KEY,
    link_payu,
    new_payu_shop,
)
from tests.storage.test_claim_takeover import another_node

fake_payu = payu_fake.fake_payu


settings = payu_support.settings_with_payu
shop = payu_support.payu_shop


def _order_statuses(fake: FakePayu) -> list[int]:
    return [r.status for r in fake.requests_to("POST", ORDERS)]


# --- OAuth -----------------------------------------------------------------------------------------


async def test_the_token_fetched_at_linking_serves_the_accounts_next_orders(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    for key in ("k1", "k2", "k3"):
        await created(client, shop, key, method="blik")
    assert len(fake_payu.token_requests()) == 1
    tokens = {r.headers["authorization"] for r in fake_payu.requests_to("POST", ORDERS)}
    assert tokens == {f"Bearer {fake_payu.token_requests()[0].answer['access_token']}"}


async def test_a_token_payu_ended_is_fetched_again_on_the_401_and_the_order_is_placed(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    fake_payu.expire_tokens()
    session = await created(client, shop, method="blik")
    assert _order_statuses(fake_payu) == [401, 302]
    assert len(fake_payu.token_requests()) == 2
    assert (await record(client, shop, session["sessionId"]))["providerName"] == "payu"


async def test_a_token_close_to_its_expires_in_is_not_used_but_fetched_anew(
    client: Client, db: Database, settings: Settings, fake_payu: FakePayu
) -> None:
    fake_payu.token_lifetime_s = 30  # inside the minute payorch keeps in hand
    shop = await new_payu_shop(client, db, settings)
    for key in ("k1", "k2"):
        await created(client, shop, key, method="blik")
    assert len(fake_payu.token_requests()) == 3  # linking, then one per order
    assert _order_statuses(fake_payu) == [302, 302]  # never sent with a token about to end


async def test_concurrent_creates_of_one_account_share_one_token_fetch(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    fake_payu.expire_tokens()
    fake_payu.token_delay_s = 0.3
    statuses: list[int] = []

    async def create(key: str) -> None:
        statuses.append((await create_session(client, shop, key, session_body(method="blik"))).status_code)

    async with trio.open_nursery() as nursery:
        for index in range(4):
            nursery.start_soon(create, f"k{index}")
    assert statuses == [201] * 4
    assert len(fake_payu.token_requests()) == 2  # linking's, and one for the four
    assert sorted(_order_statuses(fake_payu)) == [302] * 4 + [401] * 4


async def test_neither_a_token_nor_a_secret_is_ever_logged(
    client: Client, db: Database, settings: Settings, fake_payu: FakePayu, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    shop = await new_payu_shop(client, db, settings)
    fake_payu.expire_tokens()
    await created(client, shop, method="blik")
    fake_payu.revoke_pos(POS_ID)
    await create_session(client, shop, "k2", session_body(method="blik"))
    tokens = [r.answer["access_token"] for r in fake_payu.token_requests() if r.status == 200]
    assert len(tokens) == 2
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for secret in (*tokens, CLIENT_SECRET, SECOND_KEY):
        assert secret not in logged


# --- A crash between PayU's answer and payorch's store ------------------------------------------


async def _orphaned_order(
    db: Database, shop: Shop, clock: ShiftedClock, fake: FakePayu
) -> tuple[uuid.UUID, dict[str, Any]]:
    """The create of key `k1` claimed by a node that died after PayU placed its order and before it
    stored anything: its answer (the page's address) was lost with the node. The session id, and
    that order."""
    session_id = await _claimed_by_a_dead_node(db, shop, clock, "k1")
    order = {
        "extOrderId": f"{session_id}-1",
        "totalAmount": "10000",
        "currencyCode": "PLN",
        "description": "Order",
    }
    return session_id, fake.place(POS_ID, order)


async def _claimed_by_a_dead_node(db: Database, shop: Shop, clock: ShiftedClock, key: str) -> uuid.UUID:
    """The session id of `key`'s create, claimed by a node that died before storing anything."""
    sent = loads_exact(dumps_exact(session_body(method="blik")))
    fingerprint = request_fingerprint({**sent, "applicationId": shop.application_id}, "POST /api/v1/sessions")
    async with another_node(db) as gone:
        claim = await db.transaction(
            idempotency_keys.claim_idempotency_key,
            application_id=uuid.UUID(shop.application_id),
            scope="POST /api/v1/sessions",
            key=key,
            fingerprint=fingerprint,
            lease_s=60,
            retention_s=86400,
            owner=gone,
            now=clock.now(),
        )
    assert isinstance(claim, idempotency_keys.Claimed)
    return claim.resource_id


async def test_a_create_retried_after_a_crash_cancels_the_order_nobody_saw_and_places_the_next(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock, fake_payu: FakePayu
) -> None:
    session_id, orphan = await _orphaned_order(db, shop, clock, fake_payu)
    response = await create_session(client, shop, "k1", session_body(method="blik"))
    assert response.status_code == 201, await response.get_data(as_text=True)
    session = await response.get_json()
    assert session["sessionId"] == str(session_id)
    assert _order_statuses(fake_payu) == [400, 302]
    refused = fake_payu.requests_to("POST", ORDERS)[0]
    assert refused.answer["status"]["statusCode"] == "ERROR_ORDER_NOT_UNIQUE"
    assert fake_payu.only("GET", f"{ORDERS}/ext/{session_id}-1").status == 200
    assert fake_payu.only("DELETE", f"{ORDERS}/{orphan['orderId']}").status == 200
    assert fake_payu.order(orphan["orderId"])["status"] == "CANCELED"
    (placed,) = [o for o in fake_payu.orders() if o["status"] == "NEW"]
    assert placed["extOrderId"] == f"{session_id}-1-2"
    assert session["checkoutUrl"] == placed["_redirectUri"]


async def test_a_create_retried_after_a_crash_keeps_an_order_already_being_paid(
    client: Client, shop: Shop, db: Database, clock: ShiftedClock, fake_payu: FakePayu
) -> None:
    session_id, orphan = await _orphaned_order(db, shop, clock, fake_payu)
    fake_payu.order(orphan["orderId"])["status"] = "PENDING"
    response = await create_session(client, shop, "k1", session_body(method="blik"))
    assert response.status_code == 201
    session = await response.get_json()
    assert session["checkoutUrl"].endswith(f"/checkout/{session_id}/return?attempt=1")
    assert fake_payu.requests_to("DELETE", f"{ORDERS}/{orphan['orderId']}") == []
    assert len(fake_payu.orders()) == 1


# --- One merchant's credentials ------------------------------------------------------------------


async def test_one_merchants_rejected_payu_credentials_close_payu_for_no_one_else(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_payu: FakePayu
) -> None:
    rejected = await new_payu_shop(client, db, settings)
    fake_payu.accept_pos("400100", "400100", "c" * 32, "d" * 32)
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await link_payu(
        client,
        merchant,
        application["id"],
        posId="400100",
        clientId="400100",
        clientSecret="c" * 32,
        secondKey="d" * 32,
    )
    assert linked.status_code == 201
    valid = Shop(merchant, application["id"], (await new_api_key(client, merchant, application["id"]))["key"])
    fake_payu.revoke_pos(POS_ID)  # its secret regenerated in PayU's panel after it was linked
    for burst in range(4):
        response = await create_session(client, rejected, f"rejected-{burst}", session_body(method="blik"))
        assert response.status_code == 502
        session = await created(client, valid, f"valid-{burst}", method="blik")
        assert session["routing"]["selectedProvider"] == "payu"
    now = trio.current_time()
    own = account_figures(runtime.services.context.health, await health_account(db, rejected, "payu"), now)
    assert own is not None and own.circuit is Circuit.OPEN
    assert runtime.services.context.health.snapshot(now)["payu"].circuit is Circuit.CLOSED
