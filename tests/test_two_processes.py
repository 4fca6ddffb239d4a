"""Two service processes on one database: the guarantees live in the database, not in one process's
actors, so racing refunds through both never refund more than was paid, the outcomes one
process records route the other's sessions, and one API key's rate limit holds for both together."""

from __future__ import annotations

import uuid
from decimal import Decimal
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
from tests import fake_stripe as stripe_fake
from tests.conftest import TEST_ENCRYPTION_KEY, TEST_JWT_SECRET
from tests.fake_stripe import FakeStripe
from tests.helpers import (
    PASSWORD,
    SANDBOX_KEY,
    Client,
    eventually,
    new_shop,
    session_body,
    signup_body,
)
from tests.processes import serving

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

fake_stripe = stripe_fake.fake_stripe
STRIPE_KEY = "sk_test_51ShopKey0123456789abcdef"

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


async def _shop(
    http: httpx.AsyncClient, db: Database, settings: Settings, *providers: tuple[str, str]
) -> tuple[str, dict[str, str], dict[str, str]]:
    """A merchant's application linked to each (provider, key) for cards: its id, the merchant's
    JWT headers and the application's API-key headers."""
    invite = await issue_invite(db, settings, "owner@two.example")
    signup = await _post(
        http, f"/api/v1/merchants/signup?token={invite.token}", signup_body("owner@two.example", "TWO-1"), {}
    )
    assert signup.status_code == 201, signup.text
    login = await _post(http, "/api/v1/auth/login", {"email": "owner@two.example", "password": PASSWORD}, {})
    jwt = {"Authorization": f"Bearer {(await _json(login))['accessToken']}"}
    application = await _json(await _post(http, "/api/v1/applications", {"name": "shop"}, jwt))
    for name, api_key in providers:
        linked = await _post(
            http,
            f"/api/v1/applications/{application['id']}/providers",
            {"name": name, "paymentMethods": ["card"], "credentials": {"apiKey": api_key}},
            jwt,
        )
        assert linked.status_code == 201, linked.text
    key = await _json(await _post(http, f"/api/v1/applications/{application['id']}/api-keys", {}, jwt))
    return application["id"], jwt, {"X-API-Key": key["key"]}


async def _paid_session(
    http: httpx.AsyncClient, db: Database, settings: Settings
) -> tuple[str, dict[str, str]]:
    """A merchant's API-key headers and a session of 100.00 paid through the sandbox."""
    _, _, headers = await _shop(http, db, settings, ("sandbox", SANDBOX_KEY))
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


def with_stripe(fake_stripe: FakeStripe) -> dict[str, str]:
    """The environment of a process sharing the others' secrets, with Stripe enabled at its fake,
    which accepts `STRIPE_KEY`."""
    fake_stripe.accept_key(STRIPE_KEY)
    return {
        **SHARED_SECRETS,
        "PAYORCH_PROVIDERS__STRIPE__ENABLED": "true",
        "PAYORCH_PROVIDERS__STRIPE__API_BASE": fake_stripe.url,
    }


async def test_two_processes_route_on_the_same_outcomes(
    database_dsn: str, db: Database, settings: Settings, tmp_path: Path, fake_stripe: FakeStripe
) -> None:
    # The sandbox and Stripe (at its fake) linked; the rates read again before every batch.
    env = {**with_stripe(fake_stripe), "PAYORCH_ROUTING__REFRESH_S": "0", "PAYORCH_ROUTING__EXPLORATION": "0"}
    async with (
        serving(database_dsn, tmp_path / "first", env) as (_, first_url, _),
        serving(database_dsn, tmp_path / "second", env) as (_, second_url, _),
        httpx.AsyncClient(base_url=first_url, timeout=30) as first,
        httpx.AsyncClient(base_url=second_url, timeout=30) as second,
    ):
        application_id, jwt, headers = await _shop(
            first, db, settings, ("sandbox", SANDBOX_KEY), ("stripe", STRIPE_KEY)
        )
        evaluate = f"/api/v1/applications/{application_id}/routing/evaluate"

        async def create(http: httpx.AsyncClient, key: str) -> dict[str, Any]:
            response = await _post(
                http, "/api/v1/sessions", session_body(), {**headers, "Idempotency-Key": key}
            )
            assert response.status_code == 201, response.text
            created: dict[str, Any] = await _json(response)
            return created

        # Before any outcome both providers stand at the prior: the sandbox first, by name, on both.
        before = await create(second, "before")
        assert before["routing"]["selectedProvider"] == "sandbox"
        # Through the first process, the sandbox declines it; the outcome is in the database.
        declined = await first.post(
            urlsplit(before["checkoutUrl"]).path, data={"card_number": "4000000000000002"}
        )
        assert declined.status_code == 402

        async def learned(conn: Connection) -> str | None:
            found: str | None = await conn.fetchval("SELECT outcome FROM routing_outcomes")
            return found

        assert await eventually(lambda: db.autocommit(learned), timeout_s=20) == "f"
        # Both processes route on it: Stripe first, with the same scores.
        rankings = []
        for http in (first, second):
            answer = await _json(await _post(http, evaluate, session_body(), jwt))
            assert answer["selectedProvider"] == "stripe"
            rankings.append(answer["ranking"])
            assert (await create(http, f"after-{http.base_url.port}"))["routing"][
                "selectedProvider"
            ] == "stripe"
        assert rankings[0] == rankings[1]
        assert [place["provider"] for place in rankings[0]] == ["stripe", "sandbox"]


# One API key at 5 requests a second (burst 1), asked twice as often through two processes.
RATE, LOAD_S = 5, 5.0


async def test_two_processes_hold_one_rate_limit_together(
    database_dsn: str, tmp_path: Path, client: Client, db: Database, settings: Settings
) -> None:
    # The shop is set up through an app of the test's own, at the default limits; only its API key's
    # requests go to the two processes, whose limit is low.
    shop = await new_shop(client, db, settings)
    env = {
        **SHARED_SECRETS,
        "PAYORCH_LIMITS__REQUESTS_PER_SECOND": str(RATE),
        "PAYORCH_LIMITS__BURST": "1",
    }
    async with (
        serving(database_dsn, tmp_path / "first", env) as (_, first_url, _),
        serving(database_dsn, tmp_path / "second", env) as (_, second_url, _),
        httpx.AsyncClient(base_url=first_url, timeout=30) as first,
        httpx.AsyncClient(base_url=second_url, timeout=30) as second,
    ):
        statuses: list[int] = []

        async def request(http: httpx.AsyncClient) -> None:
            response = await http.get(f"/api/v1/sessions/{uuid.uuid4()}", headers=shop.headers)
            statuses.append(response.status_code)

        # Twice the rate, every other request through the other process, each on time whatever
        # the ones before are waiting for (a paced request waits up to a second for its token).
        sent = int(2 * RATE * LOAD_S)
        async with trio.open_nursery() as load:
            start = trio.current_time()
            for number in range(sent):
                await trio.sleep_until(start + number / (2 * RATE))
                load.start_soon(request, (first, second)[number % 2])

    assert set(statuses) <= {404, 429}, statuses  # 404: served (no such session)
    served = statuses.count(404)
    # Together they serve what one bucket allows: its burst, its rate over the load, and what
    # pacing lets wait (a second's worth), a little more for a slow machine; a bucket in each
    # process would serve nearly all.
    assert served <= 1 + RATE * (LOAD_S + 1) + RATE
    assert 0.25 <= statuses.count(429) / sent <= 0.65
