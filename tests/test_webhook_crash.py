"""A service process killed with SIGKILL while webhook deliveries are pending loses none of them:
the restarted process delivers every event (at least once)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, Database
from tests import webhook_receiver as receiving
from tests.conftest import TEST_ENCRYPTION_KEY, TEST_JWT_SECRET
from tests.helpers import PASSWORD, SANDBOX_KEY, eventually, session_body, signup_body
from tests.processes import serving
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

webhook_receiver = receiving.webhook_receiver
SESSIONS = 5


def _environment(receiver: WebhookReceiver) -> dict[str, str]:
    return {
        "PAYORCH_AUTH__JWT_SECRET": TEST_JWT_SECRET,
        "PAYORCH_SECURITY__ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        "PAYORCH_WEBHOOKS__CA_BUNDLE": str(receiver.ca_path),
        "PAYORCH_WEBHOOKS__ALLOW_PRIVATE_NETWORKS": "true",
        "PAYORCH_WEBHOOKS__TIMEOUT_S": "1",
        "PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S": json.dumps([0] + [0.3] * 20),
    }


async def _post(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    response = await http.post(
        path, content=dumps_exact(body), headers={**headers, "Content-Type": "application/json"}
    )
    assert response.status_code in (200, 201), response.text
    return loads_exact(response.content)


async def _paid_sessions(
    http: httpx.AsyncClient, db: Database, settings: Settings, receiver: WebhookReceiver
) -> list[str]:
    invite = await issue_invite(db, settings, "owner@crash.example")
    await _post(
        http, f"/api/v1/merchants/signup?token={invite.token}", signup_body("owner@crash.example", "CR-1"), {}
    )
    login = await _post(
        http, "/api/v1/auth/login", {"email": "owner@crash.example", "password": PASSWORD}, {}
    )
    jwt = {"Authorization": f"Bearer {login['accessToken']}"}
    application = await _post(http, "/api/v1/applications", {"name": "shop"}, jwt)
    base = f"/api/v1/applications/{application['id']}"
    await _post(
        http,
        f"{base}/providers",
        {"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": SANDBOX_KEY}},
        jwt,
    )
    config = await _post(http, f"{base}/webhooks", {"url": receiver.url}, jwt)
    receiver.accept_secret(config["signingSecret"])
    key = {"X-API-Key": (await _post(http, f"{base}/api-keys", {}, jwt))["key"]}
    session_ids = []
    for number in range(SESSIONS):
        created = await _post(
            http, "/api/v1/sessions", session_body(), {**key, "Idempotency-Key": f"s{number}"}
        )
        await http.post(urlsplit(created["checkoutUrl"]).path, data={"card_number": "4242424242424242"})
        session_ids.append(created["sessionId"])
    return session_ids


async def _pending_deliveries(db: Database) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM webhook_deliveries WHERE status = 'PENDING'"))

    return await db.autocommit(count)


async def test_deliveries_pending_at_sigkill_are_all_delivered_after_restart(
    database_dsn: str, db: Database, settings: Settings, tmp_path: Path, webhook_receiver: WebhookReceiver
) -> None:
    webhook_receiver.script([500] * 1000)  # nothing succeeds while the first process lives
    environment = _environment(webhook_receiver)
    async with serving(database_dsn, tmp_path / "first", environment) as (process, url, _):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            sessions = await _paid_sessions(http, db, settings, webhook_receiver)
        await eventually(lambda: _count_at_least(db, SESSIONS), timeout_s=20)
        await webhook_receiver.wait_for(SESSIONS, timeout_s=20)
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await process.wait()
    assert await _pending_deliveries(db) > 0
    webhook_receiver.clear_script()  # from now on every delivery is answered 200
    webhook_receiver.requests.clear()
    async with serving(database_dsn, tmp_path / "second", environment):
        await eventually(lambda: _all_delivered(db), timeout_s=30)
    delivered = {request.json()["data"]["id"] for request in webhook_receiver.requests if request.verified}
    assert delivered == set(sessions)


async def _count_at_least(db: Database, wanted: int) -> bool:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM webhook_deliveries"))

    return await db.autocommit(count) >= wanted


async def _all_delivered(db: Database) -> bool:
    async def statuses(conn: Connection) -> list[str]:
        return [row["status"] for row in await conn.fetch("SELECT status FROM webhook_deliveries")]

    found = await db.autocommit(statuses)
    return len(found) == SESSIONS and all(status == "DELIVERED" for status in found)
