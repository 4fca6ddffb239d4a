"""Two service processes on one database: the guarantees live in the database, not in one process's
actors, so racing refunds through both never refund more than was paid."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from payorch.config import Settings
from payorch.engine.invites import issue_invite
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, Database
from tests.conftest import TEST_ENCRYPTION_KEY, TEST_JWT_SECRET
from tests.helpers import PASSWORD, SANDBOX_KEY, eventually, session_body, signup_body
from tests.processes import serving

SHARED_SECRETS = {
    "PAYORCH_AUTH__JWT_SECRET": TEST_JWT_SECRET,
    "PAYORCH_SECURITY__ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
    "PAYORCH_PROVIDERS__SANDBOX__REFUND_DELAY_MS": "60000",  # outcomes stay out of the race
}


async def _json(response: httpx.Response) -> Any:
    return loads_exact(response.content)


async def _post(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await http.post(
        path, content=dumps_exact(body), headers={**headers, "Content-Type": "application/json"}
    )


async def _paid_session(
    http: httpx.AsyncClient, db: Database, settings: Settings
) -> tuple[str, dict[str, str]]:
    """A merchant's API-key headers and a session of 100.00 paid through the sandbox."""
    invite = await issue_invite(db, settings, "owner@two.example")
    signup = await _post(
        http, f"/api/v1/merchants/signup?token={invite.token}", signup_body("owner@two.example", "TWO-1"), {}
    )
    assert signup.status_code == 201, signup.text
    login = await _post(http, "/api/v1/auth/login", {"email": "owner@two.example", "password": PASSWORD}, {})
    jwt = {"Authorization": f"Bearer {(await _json(login))['accessToken']}"}
    application = await _json(await _post(http, "/api/v1/applications", {"name": "shop"}, jwt))
    linked = await _post(
        http,
        f"/api/v1/applications/{application['id']}/providers",
        {"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": SANDBOX_KEY}},
        jwt,
    )
    assert linked.status_code == 201, linked.text
    key = await _json(await _post(http, f"/api/v1/applications/{application['id']}/api-keys", {}, jwt))
    headers = {"X-API-Key": key["key"]}
    created = await _json(
        await _post(http, "/api/v1/sessions", session_body(), {**headers, "Idempotency-Key": "s"})
    )
    await http.post(urlsplit(created["checkoutUrl"]).path, data={"card_number": "4242424242424242"})

    async def paid() -> bool:
        record = await _json(await http.get(f"/api/v1/sessions/{created['sessionId']}", headers=headers))
        return bool(record["status"] == "SUCCEEDED")

    await eventually(paid, timeout_s=20)
    return created["sessionId"], headers


async def test_refunds_raced_through_two_processes_never_exceed_the_total(
    database_dsn: str, db: Database, settings: Settings, tmp_path: Path
) -> None:
    async with (
        serving(database_dsn, tmp_path / "first", SHARED_SECRETS) as (_, first_url, _),
        serving(database_dsn, tmp_path / "second", SHARED_SECRETS) as (_, second_url, _),
        httpx.AsyncClient(base_url=first_url, timeout=30) as first,
        httpx.AsyncClient(base_url=second_url, timeout=30) as second,
    ):
        session_id, headers = await _paid_session(first, db, settings)
        statuses: list[int] = []

        async def refund(http: httpx.AsyncClient, number: int) -> None:
            response = await _post(
                http,
                f"/api/v1/sessions/{session_id}/refunds",
                {"amount": Decimal("10.00")},
                {**headers, "Idempotency-Key": f"race-{number}"},
            )
            statuses.append(response.status_code)

        async with trio.open_nursery() as racers:
            for number in range(24):
                racers.start_soon(refund, first if number % 2 else second, number)

    accepted = [status for status in statuses if status in (201, 202)]
    assert len(accepted) == 10
    assert sorted(set(statuses) - {201, 202}) == [422]

    async def refunded(conn: Connection) -> int:
        return int(
            await conn.fetchval(
                "SELECT sum(amount_minor) FROM refunds WHERE session_id = $1 AND status <> 'FAILED'",
                uuid.UUID(session_id),
            )
        )

    assert await db.autocommit(refunded) == 10000
