"""Two service processes on one database, one declined session's customer coming back through both
at once (a double click landing on two nodes): one next attempt opens, at one checkout, and every
return sends the customer to it. The guard is the database's (`storage.next_attempt`).
`recovering_shop` is the two processes and the application they serve, for the tests of recovery
on two processes (tests/test_never_paid_twice.py too)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.storage.database import Connection, Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import SANDBOX_KEY, session_body
from tests.processes import serving
from tests.test_two_processes import STRIPE_KEY, _json, _post, _shop, with_stripe

pytestmark = [
    pytest.mark.long,  # runs for seconds: handed to the test workers first (tests/conftest.py)
    # The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
    pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning"),
]

fake_stripe = stripe_fake.fake_stripe

# A connection idle for the server's `server.keep_alive_timeout_s` (5 s) is closed by the server; one
# kept as long by the client (httpx's default expiry, 5 s too) may be sent a request just as it
# closes, which then fails unanswered. Clients let theirs go sooner.
_KEPT_ALIVE_LESS_THAN_THE_SERVER = httpx.Limits(keepalive_expiry=2.0)


@dataclass(frozen=True)
class RecoveringShop:
    """Two processes serving one application: the sandbox first, Stripe next, two attempts."""

    processes: tuple[httpx.AsyncClient, httpx.AsyncClient]  # each process's own address
    application_id: str
    api_headers: dict[str, str]


@asynccontextmanager
async def recovering_shop(
    database_dsn: str,
    db: Database,
    settings: Settings,
    tmp_path: Path,
    fake_stripe: FakeStripe,
    more_env: dict[str, str] | None = None,
) -> AsyncIterator[RecoveringShop]:
    """Two `payorch serve` processes on `database_dsn` (their environment `with_stripe` and
    `more_env`), and a merchant's application linked to the sandbox and Stripe whose routing
    document sends sessions to the sandbox first and recovers a decline at Stripe."""
    env = {**with_stripe(fake_stripe), **(more_env or {})}
    async with (
        serving(database_dsn, tmp_path / "first", env) as (_, first_url, _),
        # One public address for both, as behind a proxy in front of several processes: the links
        # each process gives a provider (the way back) are the same, so are its requests for the
        # same checkout, which the provider's idempotency key then meets.
        serving(database_dsn, tmp_path / "second", {**env, "PAYORCH_SERVER__PUBLIC_BASE_URL": first_url}) as (
            _,
            second_url,
            _,
        ),
        httpx.AsyncClient(base_url=first_url, timeout=30, limits=_KEPT_ALIVE_LESS_THAN_THE_SERVER) as first,
        httpx.AsyncClient(base_url=second_url, timeout=30, limits=_KEPT_ALIVE_LESS_THAN_THE_SERVER) as second,
    ):
        application_id, jwt, headers = await _shop(
            first, db, settings, ("sandbox", SANDBOX_KEY), ("stripe", STRIPE_KEY)
        )
        document = {
            "default": {"type": "priority", "providers": ["sandbox", "stripe"]},
            "recovery": {"maxAttempts": 2},
        }
        stored = await second.put(
            f"/api/v1/applications/{application_id}/routing", json=document, headers=jwt
        )
        assert stored.status_code == 200, stored.text
        yield RecoveringShop((first, second), application_id, headers)


async def test_returns_raced_through_two_processes_open_one_next_attempt(
    database_dsn: str, db: Database, settings: Settings, tmp_path: Path, fake_stripe: FakeStripe
) -> None:
    async with recovering_shop(database_dsn, db, settings, tmp_path, fake_stripe) as shop:
        (first, second), headers = shop.processes, shop.api_headers
        body = session_body(
            redirectUrls={"success": "https://shop.example/ok", "failure": "https://shop.example/ko"}
        )
        created = await _json(
            await _post(first, "/api/v1/sessions", body, {**headers, "Idempotency-Key": "r"})
        )
        declined = await first.post(
            urlsplit(created["checkoutUrl"]).path, data={"card_number": "4000000000000002"}
        )
        assert declined.status_code == 303
        back = urlsplit(declined.headers["Location"])
        sent_on: list[str] = []

        async def come_back(http: httpx.AsyncClient) -> None:
            response = await http.get(f"{back.path}?{back.query}")
            assert response.status_code == 303, response.text
            sent_on.append(response.headers["Location"])

        async with trio.open_nursery() as racers:
            for number in range(8):
                racers.start_soon(come_back, (first, second)[number % 2])

    checkouts = {
        r.answer["url"] for r in fake_stripe.requests_to("POST", "/v1/checkout/sessions") if r.status == 200
    }
    assert len(checkouts) == 1
    assert set(sent_on) == checkouts

    async def attempts(conn: Connection) -> tuple[int, str]:
        ended = int(
            await conn.fetchval(
                "SELECT count(*) FROM payment_attempts WHERE session_id = $1", uuid.UUID(created["sessionId"])
            )
        )
        provider: str = await conn.fetchval(
            "SELECT provider_name FROM checkout_sessions WHERE id = $1", uuid.UUID(created["sessionId"])
        )
        return ended, provider

    assert await db.autocommit(attempts) == (1, "stripe")
