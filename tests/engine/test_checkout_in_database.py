"""A session routed to the sandbox, whose checkouts live in payorch's own database, is stored with its
checkout, its Idempotency-Key's claim and answer in one statement (`engine.payments.checkout`);
should that fail, it is tried again in a unit of its own, and nothing of the failed attempt
remains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from payorch.providers.base import CheckoutInDatabase, ProviderError
from payorch.providers.sandbox.adapter import SandboxProvider
from payorch.runtime import Runtime
from payorch.storage import sandbox as sandbox_store
from payorch.storage.database import Connection, Database
from payorch.storage.sandbox import NewCheckout
from payorch.storage.sessions import AnsweredSession
from payorch.values.statuses import RoutingReason
from tests.helpers import Client, Shop, create_session, new_shop


@pytest.fixture
async def shop(client: Client, db: Database, runtime: Runtime) -> Shop:
    return await new_shop(client, db, runtime.services.context.settings)


def _sandbox(runtime: Runtime) -> SandboxProvider:
    sandbox = runtime.services.context.providers.get("sandbox")
    assert isinstance(sandbox, SandboxProvider)
    return sandbox


async def _checkouts_of(db: Database, session_id: str) -> list[dict[str, Any]]:
    async def read(conn: Connection) -> list[dict[str, Any]]:
        rows = await conn.fetch(
            "SELECT id FROM sandbox_checkouts WHERE client_reference = $1 ORDER BY created_at", session_id
        )
        return [dict(row) for row in rows]

    return await db.autocommit(read)


async def test_the_sandbox_is_a_provider_whose_checkouts_live_in_payorchs_database(runtime: Runtime) -> None:
    assert isinstance(_sandbox(runtime), CheckoutInDatabase)


async def test_a_sandbox_session_is_created_with_its_checkout_without_a_call_of_its_own(
    client: Client, db: Database, runtime: Runtime, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    async def create_checkout(*args: Any, **kwargs: Any) -> Any:
        calls.append("create_checkout")
        raise AssertionError("the sandbox's own round trip was taken")

    monkeypatch.setattr(_sandbox(runtime), "create_checkout", create_checkout)
    response = await create_session(client, shop, "one-transaction")
    assert response.status_code == 201
    body = await response.get_json()
    assert calls == []
    checkouts = await _checkouts_of(db, body["sessionId"])
    assert len(checkouts) == 1
    assert f"/sandbox/checkout/{checkouts[0]['id']}" in body["checkoutUrl"]
    assert body["routing"]["reason"] != RoutingReason.CASCADE
    replayed = await create_session(client, shop, "one-transaction")
    assert replayed.status_code == 201
    assert await replayed.get_json() == body


async def test_a_sandbox_refusal_before_the_statement_creates_the_session_the_usual_way(
    client: Client, db: Database, runtime: Runtime, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ProviderError("sandbox: refused before anything is stored")

    monkeypatch.setattr(_sandbox(runtime), "checkout_to_store", refuse)
    response = await create_session(client, shop, "refused-before")
    assert response.status_code == 201
    body = await response.get_json()
    assert len(await _checkouts_of(db, body["sessionId"])) == 1


async def test_a_session_the_statement_fails_to_store_leaves_no_checkout_behind(
    client: Client, db: Database, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sandbox_store.insert_checkouts_with_claimed_sessions
    failed: list[int] = []

    async def fail_once(
        conn: Connection, stored: Sequence[tuple[NewCheckout, AnsweredSession, bytes]], *args: Any
    ) -> None:
        if not failed:
            failed.append(len(stored))
            # The first statement stores the checkout and its session; the second, the same again,
            # finds the checkout's key taken: the database refuses it, and the batch is undone.
            await real(conn, [*stored, stored[0]], *args)
        await real(conn, stored, *args)

    monkeypatch.setattr(sandbox_store, "insert_checkouts_with_claimed_sessions", fail_once)
    response = await create_session(client, shop, "undone")
    assert response.status_code == 201, await response.get_data(as_text=True)
    assert failed == [1]
    body = await response.get_json()
    checkouts = await _checkouts_of(db, body["sessionId"])
    assert len(checkouts) == 1
    assert f"/sandbox/checkout/{checkouts[0]['id']}" in body["checkoutUrl"]
