"""Failover in seconds: what a `payorch serve` process killed with SIGKILL had claimed is taken over
by another process on the same database (or by the same node restarted) at once, not when the
claims' leases run out. The leases are long here (Idempotency-Key claims 80 s, webhook deliveries
35 s), and every takeover must be done within FAILOVER_S, well inside them: retried creates get
201 and one session each (never two), and every held delivery arrives, signed."""

from __future__ import annotations

import json
import signal
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
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
from tests import webhook_receiver as receiving
from tests.conftest import TEST_ENCRYPTION_KEY, TEST_JWT_SECRET
from tests.fake_stripe import FakeStripe, ScriptedFailure
from tests.helpers import PASSWORD, SANDBOX_KEY, eventually, session_body, signup_body
from tests.processes import keys_and_sessions, serving
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

fake_stripe = stripe_fake.fake_stripe
webhook_receiver = receiving.webhook_receiver

FAILOVER_S = 15  # against leases of 80 s (Idempotency-Key) and 35 s (webhook delivery)
CREATES = 8  # session creates in flight at the killed node, each waiting on a slow Stripe
DELIVERIES = 4  # webhook deliveries in flight at the killed node (4 = the in-flight limit per endpoint)
STRIPE_KEY = "sk_test_51FailoverKey0123456789"


def _environment(receiver: WebhookReceiver, stripe: FakeStripe) -> dict[str, str]:
    return {
        "PAYORCH_AUTH__JWT_SECRET": TEST_JWT_SECRET,
        "PAYORCH_SECURITY__ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        "PAYORCH_WEBHOOKS__CA_BUNDLE": str(receiver.ca_path),
        "PAYORCH_WEBHOOKS__ALLOW_PRIVATE_NETWORKS": "true",
        "PAYORCH_WEBHOOKS__TIMEOUT_S": "30",  # a delivery's lease: 35 s
        "PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S": json.dumps([0] + [0.3] * 20),
        "PAYORCH_PROVIDERS__STRIPE__ENABLED": "true",
        "PAYORCH_PROVIDERS__STRIPE__API_BASE": stripe.url,
        # The killed node's Stripe calls must still be waiting when it dies, however slowly the test
        # goes. The Idempotency-Key lease follows: 30 s + 50 s.
        "PAYORCH_PROVIDERS__STRIPE__TIMEOUT_S": "30",
        "PAYORCH_ENGINE__PROVIDER_TIMEOUT_S": "30",
    }


@dataclass(frozen=True)
class Scene:
    """One merchant: application 1 on the sandbox with a webhook to the receiver, application 2 on
    Stripe (the fake)."""

    webhook_app: dict[str, str]  # API-key headers
    stripe_app: dict[str, str]
    stripe_application_id: uuid.UUID


@dataclass(frozen=True)
class Held:
    """What the doomed node held when it was killed."""

    keys: list[str]  # Idempotency-Keys of the creates in flight
    paid: set[str]  # sessions whose session.completed delivery was in flight
    arrived: int  # requests the receiver had when the claims were held
    holds: list[trio.Event]  # set after the kill: the receiver answers the dead node's attempts


async def _post(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await http.post(
        path, content=dumps_exact(body), headers={**headers, "Content-Type": "application/json"}
    )


async def _created(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    response = await _post(http, path, body, headers)
    assert response.status_code in (200, 201), response.text
    return loads_exact(response.content)


async def _scene(url: str, db: Database, settings: Settings, receiver: WebhookReceiver) -> Scene:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        invite = await issue_invite(db, settings, "owner@failover.example")
        signup = signup_body("owner@failover.example", "FO-1")
        await _created(http, f"/api/v1/merchants/signup?token={invite.token}", signup, {})
        login = {"email": "owner@failover.example", "password": PASSWORD}
        tokens = await _created(http, "/api/v1/auth/login", login, {})
        jwt = {"Authorization": f"Bearer {tokens['accessToken']}"}

        async def application(name: str, provider: str, api_key: str) -> tuple[str, dict[str, str]]:
            created = await _created(http, "/api/v1/applications", {"name": name}, jwt)
            base = f"/api/v1/applications/{created['id']}"
            link = {"name": provider, "paymentMethods": ["card"], "credentials": {"apiKey": api_key}}
            await _created(http, f"{base}/providers", link, jwt)
            key = await _created(http, f"{base}/api-keys", {}, jwt)
            return base, {"X-API-Key": key["key"]}

        webhook_base, webhook_app = await application("hooks", "sandbox", SANDBOX_KEY)
        config = await _created(http, f"{webhook_base}/webhooks", {"url": receiver.url}, jwt)
        receiver.accept_secret(config["signingSecret"])
        stripe_base, stripe_app = await application("stripe", "stripe", STRIPE_KEY)
    return Scene(webhook_app, stripe_app, uuid.UUID(stripe_base.rsplit("/", 1)[1]))


async def _create_at_doomed_node(
    http: httpx.AsyncClient, scene: Scene, key: str, answered: list[str]
) -> None:
    try:
        response = await _post(
            http, "/api/v1/sessions", session_body(), {**scene.stripe_app, "Idempotency-Key": key}
        )
    except httpx.TransportError:
        return  # the node died holding the claim, as intended
    answered.append(f"{key}: {response.status_code} {response.text}")


async def _hold_claims(
    nursery: trio.Nursery, url: str, scene: Scene, stripe: FakeStripe, receiver: WebhookReceiver
) -> Held:
    """At the node at `url`: DELIVERIES deliveries hanging at the receiver and CREATES creates
    hanging at Stripe, each with its claim in the database. The creates run in `nursery` until the
    node dies; it fails the test if any of them is answered."""
    holds = [trio.Event() for _ in range(DELIVERIES)]
    receiver.script([ScriptedResponse(hold=hold) for hold in holds])
    paid: set[str] = set()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for number in range(DELIVERIES):
            created = await _created(
                http,
                "/api/v1/sessions",
                session_body(),
                {**scene.webhook_app, "Idempotency-Key": f"p{number}"},
            )
            await http.post(urlsplit(created["checkoutUrl"]).path, data={"card_number": "4242424242424242"})
            paid.add(created["sessionId"])
    await receiver.wait_for(DELIVERIES, timeout_s=20)
    stripe.fail_next("POST", "/v1/checkout/sessions", *[ScriptedFailure(500, delay_s=120)] * CREATES)
    keys = [f"create-{number}" for number in range(CREATES)]
    answered: list[str] = []

    async def creates() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http, trio.open_nursery() as inner:
            for key in keys:
                inner.start_soon(_create_at_doomed_node, http, scene, key, answered)
        assert not answered, f"creates answered before the node died: {answered}"

    nursery.start_soon(creates)
    await eventually(lambda: _stripe_creates_at_least(stripe, CREATES), timeout_s=20)
    assert not answered, answered
    return Held(keys, paid, len(receiver.requests), holds)


async def _stripe_creates_at_least(stripe: FakeStripe, count: int) -> bool:
    return len(stripe.requests_to("POST", "/v1/checkout/sessions")) >= count


async def _kill(process: trio.Process, held: Held) -> None:
    process.send_signal(signal.SIGKILL)
    with trio.fail_after(10):
        await process.wait()
    for hold in held.holds:
        hold.set()


async def _taken_over(
    url: str, db: Database, scene: Scene, held: Held, stripe: FakeStripe, receiver: WebhookReceiver
) -> None:
    """Within FAILOVER_S, the node at `url` creates each held key's session (retried with the same
    key and body) and every held delivery arrives, signed; then each key has exactly one session."""
    sessions: dict[str, str] = {}
    last: dict[str, str] = {key: "not answered" for key in held.keys}

    async def retry(http: httpx.AsyncClient, key: str) -> None:
        async def created() -> str | None:
            response = await _post(
                http, "/api/v1/sessions", session_body(), {**scene.stripe_app, "Idempotency-Key": key}
            )
            last[key] = f"{response.status_code} {response.text}"
            if response.status_code == 409:
                return None  # still in progress: retried, as a client would
            assert response.status_code == 201, f"{key}: {last[key]}"
            session_id: str = loads_exact(response.content)["sessionId"]
            return session_id

        # The deadline below ends it first.
        sessions[key] = await eventually(created, timeout_s=2 * FAILOVER_S, every_s=0.25)

    def delivered() -> set[str]:
        after_kill = receiver.requests[held.arrived :]
        return {request.json()["data"]["id"] for request in after_kill if request.verified}

    async def all_delivered() -> bool:
        return held.paid <= delivered() and await _all_delivered(db)

    async def deliveries() -> None:
        await eventually(all_delivered, timeout_s=2 * FAILOVER_S)  # the deadline below ends it first

    with trio.move_on_after(FAILOVER_S) as deadline:
        async with (
            httpx.AsyncClient(base_url=url, timeout=FAILOVER_S) as http,
            trio.open_nursery() as nursery,
        ):
            for key in held.keys:
                nursery.start_soon(retry, http, key)
            nursery.start_soon(deliveries)
    if deadline.cancelled_caught:
        waiting: dict[str, list[str]] = {}
        for key in held.keys:
            if key not in sessions:
                waiting.setdefault(last[key], []).append(key)
        pytest.fail(
            f"not taken over within {FAILOVER_S} s: creates of keys still answered {waiting}; "
            f"deliveries arrived again for {len(held.paid & delivered())} of {len(held.paid)} sessions"
        )
    keys, stored = await db.autocommit(keys_and_sessions, scene.stripe_application_id)
    assert keys == {key: uuid.UUID(session) for key, session in sessions.items()}
    assert sorted(stored) == sorted(keys.values())  # one session per key, none besides
    # The retry asked Stripe under the dead node's Idempotency-Key: one Checkout Session per key there too.
    sent = stripe.requests_to("POST", "/v1/checkout/sessions")
    assert len({request.headers["idempotency-key"] for request in sent}) == len(held.keys)


async def _all_delivered(db: Database) -> bool:
    async def statuses(conn: Connection) -> list[str]:
        return [row["status"] for row in await conn.fetch("SELECT status FROM webhook_deliveries")]

    found = await db.autocommit(statuses)
    return len(found) == DELIVERIES and all(status == "DELIVERED" for status in found)


async def test_a_node_killed_holding_claims_is_taken_over_by_the_other_node_within_seconds(
    database_dsn: str,
    db: Database,
    settings: Settings,
    tmp_path: Path,
    webhook_receiver: WebhookReceiver,
    fake_stripe: FakeStripe,
) -> None:
    fake_stripe.accept_key(STRIPE_KEY)
    environment = _environment(webhook_receiver, fake_stripe)
    async with (
        serving(database_dsn, tmp_path / "a", environment) as (node_a, url_a, _),
        AsyncExitStack() as stack,
    ):
        scene = await _scene(url_a, db, settings, webhook_receiver)
        async with trio.open_nursery() as doomed:
            held = await _hold_claims(doomed, url_a, scene, fake_stripe, webhook_receiver)
            # B starts once A holds every claim, so the deliveries held are A's.
            _, url_b, _ = await stack.enter_async_context(serving(database_dsn, tmp_path / "b", environment))
            await _kill(node_a, held)
        await _taken_over(url_b, db, scene, held, fake_stripe, webhook_receiver)


async def test_a_node_killed_holding_claims_takes_them_over_as_soon_as_it_restarts(
    database_dsn: str,
    db: Database,
    settings: Settings,
    tmp_path: Path,
    webhook_receiver: WebhookReceiver,
    fake_stripe: FakeStripe,
) -> None:
    fake_stripe.accept_key(STRIPE_KEY)
    environment = _environment(webhook_receiver, fake_stripe)
    async with serving(database_dsn, tmp_path / "first", environment) as (node, url, _):
        scene = await _scene(url, db, settings, webhook_receiver)
        async with trio.open_nursery() as doomed:
            held = await _hold_claims(doomed, url, scene, fake_stripe, webhook_receiver)
            await _kill(node, held)
    async with serving(database_dsn, tmp_path / "restarted", environment) as (_, url, _):
        await _taken_over(url, db, scene, held, fake_stripe, webhook_receiver)
