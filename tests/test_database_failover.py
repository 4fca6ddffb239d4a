"""The database fails over too: payorch on a primary and its synchronous standby, both named in
`database.url` (`target_session_attrs=read-write`), under steady load from several clients, while the
primary is killed (or stopped for a planned switchover) and the standby promoted.

Each client creates a session with its own Idempotency-Key, pays it on the sandbox's checkout page and
refunds part of it twice, each refund with a key of its own, retrying every request that fails on the
server's side (5xx, or no answer) with the same key, as a merchant's client would. Afterwards:
- every session a client was answered 201 for is still there, with every refund it was answered
  201 or 202 for;
- no Idempotency-Key made two sessions or two refunds, and no session is refunded beyond its payment;
- creates succeed again within `CREATES_BACK_S` of the promotion;
- every `session.completed` and `refund.completed` event the database holds, committed before the
  failover or after it, reaches the merchant's HTTPS receiver, signed;
- the process is back by itself on the promoted primary: it holds its node identity there (its
  advisory lock), /readyz answers 200, and it hears the changes notified there (LISTEN): a key
  revoked on the new primary is refused long before the API-key cache would forget it.
A planned switchover answers nothing but 503 for requests in flight while there is no primary, and
those only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from payorch.config import AuthSettings, DatabaseSettings, SecuritySettings, ServerSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage import applications as applications_store
from payorch.storage.database import Connection, open_database
from payorch.storage.nodes import NODE_LOCK_CLASS
from tests import webhook_receiver as receiving
from tests.conftest import TEST_ENCRYPTION_KEY, TEST_JWT_SECRET
from tests.helpers import PASSWORD, SANDBOX_KEY, eventually, session_body, signup_body
from tests.processes import serving
from tests.replicated_postgres import ReplicatedPair, start_replicated_pair
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

webhook_receiver = receiving.webhook_receiver

CLIENTS = 4
CREATES_BACK_S = 10.0  # the promoted standby takes creates within this much of its promotion
TEST_S = 100.0  # the whole test, load and checks: a bound, not an expectation
PAYMENT = Decimal("100.00")
REFUNDS = (Decimal("30.00"), Decimal("20.00"))  # each session's two partial refunds
SESSION_SCOPE = "POST /api/v1/sessions"
PAID_CARD = "4242424242424242"
RETRY_PAUSE_S = 0.1  # a client's pause before it sends a request again
TRIES = 600  # at most this many sends of one request
LISTEN_BACK_S = 10.0  # a notification on the promoted primary is heard within this much


def _environment(receiver: WebhookReceiver) -> dict[str, str]:
    return {
        "PAYORCH_AUTH__JWT_SECRET": TEST_JWT_SECRET,
        "PAYORCH_SECURITY__ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        "PAYORCH_WEBHOOKS__CA_BUNDLE": str(receiver.ca_path),
        "PAYORCH_WEBHOOKS__ALLOW_PRIVATE_NETWORKS": "true",
        "PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S": json.dumps([0] + [0.3] * 30),
        "PAYORCH_PROVIDERS__SANDBOX__REFUND_DELAY_MS": "50",
        # The clients' steady load, polls included, stays inside the rate limits.
        "PAYORCH_LIMITS__REQUESTS_PER_SECOND": "2000",
        "PAYORCH_LIMITS__BURST": "4000",
        "PAYORCH_LIMITS__MERCHANT_REQUESTS_PER_SECOND": "2000",
        "PAYORCH_LIMITS__MERCHANT_BURST": "4000",
        # A key stays cached for an hour unless a notification (LISTEN) says it changed.
        "PAYORCH_AUTH__API_KEY_CACHE_S": "3600",
    }


@pytest.fixture
async def replicated() -> AsyncIterator[ReplicatedPair]:
    pair = await trio.to_thread.run_sync(start_replicated_pair)
    try:
        yield pair
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pair.remove)


@dataclass(frozen=True)
class Answered:
    """One request a client sent and what came of it (status 0: no answer, the connection failed)."""

    what: str
    status: int
    sent_at: float  # trio.current_time()
    answered_at: float
    retry_after: str | None = None  # its Retry-After header


@dataclass
class Load:
    """What the clients were told, and every answer they had."""

    sessions: dict[str, str] = field(default_factory=dict)  # create key -> session id of its 201s
    refunds: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (session id, refund id)
    answers: list[Answered] = field(default_factory=list)
    paid_and_refunded: int = 0

    def server_errors(self) -> list[Answered]:
        return [answer for answer in self.answers if answer.status >= 500 or answer.status == 0]


async def _post(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await http.post(
        path, content=dumps_exact(body), headers={**headers, "Content-Type": "application/json"}
    )


async def _answered(
    load: Load, what: str, send: Callable[[], Awaitable[httpx.Response]], accepted: tuple[int, ...]
) -> httpx.Response:
    """`send()` until it is answered one of `accepted`, as a merchant's client retries: again after
    a 5xx, no answer at all, or 409 (its key's first request still in progress), the same request."""
    for _ in range(TRIES):
        sent_at = trio.current_time()
        try:
            response = await send()
        except httpx.TransportError:
            load.answers.append(Answered(what, 0, sent_at, trio.current_time()))
            await trio.sleep(RETRY_PAUSE_S)
            continue
        answered_at = trio.current_time()
        retry_after = response.headers.get("Retry-After")
        load.answers.append(Answered(what, response.status_code, sent_at, answered_at, retry_after))
        if response.status_code in accepted:
            return response
        assert response.status_code >= 500 or response.status_code == 409, f"{what}: {response.text}"
        await trio.sleep(RETRY_PAUSE_S)
    raise AssertionError(f"{what}: not answered {accepted} after {TRIES} tries")


@dataclass(frozen=True)
class Shop:
    api: dict[str, str]  # the application's API-key headers
    application_id: uuid.UUID
    api_key_id: uuid.UUID


async def _shop(url: str, pair: ReplicatedPair, tmp_path: Path, receiver: WebhookReceiver) -> Shop:
    """A merchant's application on the sandbox, with a webhook configuration to `receiver`."""
    settings = Settings(
        server=ServerSettings(state_dir=tmp_path / "var"),
        database=DatabaseSettings(url=pair.url(), pool_min=1, pool_max=1),
        auth=AuthSettings(jwt_secret=TEST_JWT_SECRET),
        security=SecuritySettings(encryption_key=TEST_ENCRYPTION_KEY),
    )
    async with open_database(pair.url(), min_size=1, max_size=1) as db:
        invite = await issue_invite(db, settings, "owner@failover.example")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:

        async def created(path: str, body: Any, headers: dict[str, str]) -> Any:
            response = await _post(http, path, body, headers)
            assert response.status_code in (200, 201), response.text
            return loads_exact(response.content)

        signup = signup_body("owner@failover.example", "DB-1")
        await created(f"/api/v1/merchants/signup?token={invite.token}", signup, {})
        login = {"email": "owner@failover.example", "password": PASSWORD}
        jwt = {"Authorization": f"Bearer {(await created('/api/v1/auth/login', login, {}))['accessToken']}"}
        application = await created("/api/v1/applications", {"name": "shop"}, jwt)
        base = f"/api/v1/applications/{application['id']}"
        link = {"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": SANDBOX_KEY}}
        await created(f"{base}/providers", link, jwt)
        config = await created(f"{base}/webhooks", {"url": receiver.url}, jwt)
        receiver.accept_secret(config["signingSecret"])
        key = await created(f"{base}/api-keys", {}, jwt)
    return Shop({"X-API-Key": key["key"]}, uuid.UUID(application["id"]), uuid.UUID(key["id"]))


async def _create(http: httpx.AsyncClient, shop: Shop, key: str, load: Load) -> dict[str, Any]:
    """A session created under `key`; every 201 of the key must name the same session."""
    response = await _answered(
        load,
        f"create {key}",
        lambda: _post(
            http, "/api/v1/sessions", session_body(str(PAYMENT)), {**shop.api, "Idempotency-Key": key}
        ),
        (201,),
    )
    created: dict[str, Any] = loads_exact(response.content)
    assert load.sessions.setdefault(key, created["sessionId"]) == created["sessionId"]
    return created


async def _pay_and_refund(http: httpx.AsyncClient, shop: Shop, key: str, load: Load) -> None:
    """One customer's payment and the merchant's two refunds of it."""
    created = await _create(http, shop, key, load)
    session_id = created["sessionId"]
    checkout = urlsplit(created["checkoutUrl"]).path
    # 409: paid already, by a try whose answer was lost.
    await _answered(
        load, f"pay {key}", lambda: http.post(checkout, data={"card_number": PAID_CARD}), (200, 409)
    )

    async def succeeded() -> bool:
        response = await _answered(
            load, f"read {key}", lambda: http.get(f"/api/v1/sessions/{session_id}", headers=shop.api), (200,)
        )
        return bool(loads_exact(response.content)["status"] == "SUCCEEDED")

    await eventually(succeeded, timeout_s=TEST_S, every_s=RETRY_PAUSE_S)  # the test's deadline ends it first
    for number, amount in enumerate(REFUNDS, start=1):
        refund_key = f"{key}-refund-{number}"
        response = await _answered(
            load,
            f"refund {refund_key}",
            lambda refund_key=refund_key, amount=amount: _post(  # type: ignore[misc]
                http,
                f"/api/v1/sessions/{session_id}/refunds",
                {"amount": amount},
                {**shop.api, "Idempotency-Key": refund_key},
            ),
            (201, 202),
        )
        acknowledged = (session_id, loads_exact(response.content)["refundId"])
        assert load.refunds.setdefault(refund_key, acknowledged) == acknowledged
    load.paid_and_refunded += 1


async def _client(url: str, shop: Shop, number: int, load: Load, stop: trio.Event) -> None:
    """One merchant's client: payments one after another until `stop` is set."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        payment = 0
        while not stop.is_set():
            payment += 1
            await _pay_and_refund(http, shop, f"client-{number}-payment-{payment}", load)


async def _at_least(load: Load, count: int) -> bool:
    return load.paid_and_refunded >= count


@dataclass(frozen=True)
class Stored:
    """What the promoted primary holds of the shop."""

    session_keys: dict[str, uuid.UUID]  # create key -> its session
    sessions: list[uuid.UUID]
    refund_keys: list[uuid.UUID]  # the refund each refund key names
    refunds: list[uuid.UUID]
    over_refunded: list[uuid.UUID]  # sessions whose refunds (but the failed ones) exceed their payment
    events: set[str]  # the ids of session.completed and refund.completed events


async def _stored(conn: Connection, application_id: uuid.UUID) -> Stored:
    session_keys = await conn.fetch(
        """SELECT key, resource_id FROM idempotency_keys
           WHERE application_id = $1 AND scope = $2 AND resource_id IS NOT NULL""",
        application_id,
        SESSION_SCOPE,
    )
    refund_keys = await conn.fetch(
        """SELECT resource_id FROM idempotency_keys
           WHERE application_id = $1 AND scope LIKE '%/refunds' AND response_status IS NOT NULL""",
        application_id,
    )
    sessions = await conn.fetch("SELECT id FROM checkout_sessions WHERE application_id = $1", application_id)
    refunds = await conn.fetch("SELECT id FROM refunds WHERE application_id = $1", application_id)
    over = await conn.fetch(
        """SELECT s.id FROM checkout_sessions s JOIN refunds r ON r.session_id = s.id
           WHERE s.application_id = $1 AND r.status <> 'FAILED'
           GROUP BY s.id, s.amount_minor HAVING sum(r.amount_minor) > s.amount_minor""",
        application_id,
    )
    events = await conn.fetch(
        """SELECT id FROM outbox_events
           WHERE application_id = $1 AND type IN ('session.completed', 'refund.completed')""",
        application_id,
    )
    return Stored(
        session_keys={row["key"]: row["resource_id"] for row in session_keys},
        sessions=[row["id"] for row in sessions],
        refund_keys=[row["resource_id"] for row in refund_keys],
        refunds=[row["id"] for row in refunds],
        over_refunded=[row["id"] for row in over],
        events={row["id"] for row in events},
    )


async def _check_nothing_lost_nor_doubled(
    url: str, pair: ReplicatedPair, shop: Shop, load: Load, receiver: WebhookReceiver
) -> None:
    async with open_database(pair.url(), min_size=1, max_size=1) as db:
        stored = await db.snapshot(_stored, shop.application_id)
    # Every session is its key's, one key one session, and every key a client was answered for
    # names the session it was answered.
    assert sorted(stored.sessions) == sorted(stored.session_keys.values())
    for key, session_id in load.sessions.items():
        assert stored.session_keys[key] == uuid.UUID(session_id), key
    # Every refund is one key's, one key one refund.
    assert sorted(stored.refunds) == sorted(stored.refund_keys)
    assert stored.over_refunded == []
    # What the clients were told is what the service says.
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for key, session_id in load.sessions.items():
            response = await http.get(f"/api/v1/sessions/{session_id}", headers=shop.api)
            assert response.status_code == 200, f"{key}: {response.text}"
            refunds = {refund["id"] for refund in loads_exact(response.content)["refunds"] or []}
            acknowledged = {refund for session, refund in load.refunds.values() if session == session_id}
            assert acknowledged <= refunds, key

    def delivered() -> set[str]:
        return {request.json()["id"] for request in receiver.requests if request.verified}

    async def every_event_delivered() -> bool:
        return stored.events <= delivered()

    await eventually(every_event_delivered, timeout_s=TEST_S)  # the test's deadline ends it first


async def _holds_its_node_identity(conn: Connection) -> bool:
    held: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND granted)",
        NODE_LOCK_CLASS,
    )
    return held


async def _back_by_itself(url: str, pair: ReplicatedPair, shop: Shop, session_id: str) -> None:
    """The node's connection (its lock, LISTEN) is on the promoted primary: /readyz answers 200,
    the node's lock is held there, and an API key revoked there (notified on commit, as every
    revocation is) is refused at once, though the process caches keys for an hour."""
    async with (
        open_database(pair.url(), min_size=1, max_size=1) as db,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):

        async def ready() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await eventually(ready, timeout_s=TEST_S)  # the test's deadline ends it first
        assert await db.autocommit(_holds_its_node_identity)
        session = f"/api/v1/sessions/{session_id}"
        assert (await http.get(session, headers=shop.api)).status_code == 200  # the key is cached
        await db.transaction(
            applications_store.revoke_api_key,
            shop.application_id,
            shop.api_key_id,
            now=datetime.now(UTC),
        )

        async def refused() -> bool:
            return (await http.get(session, headers=shop.api)).status_code == 401

        try:
            await eventually(refused, timeout_s=LISTEN_BACK_S)
        except trio.TooSlowError:
            pytest.fail(
                "a key revoked on the promoted primary is still accepted: the process did not hear "
                "the change, its LISTEN connection (storage.application_changes) is not listening there"
            )


async def _creates_again(url: str, shop: Shop, load: Load) -> None:
    """A create answered 201 within `CREATES_BACK_S` (each try answered 503 until then)."""
    async with httpx.AsyncClient(base_url=url, timeout=CREATES_BACK_S) as http:

        async def created() -> bool:
            response = await _post(
                http, "/api/v1/sessions", session_body(), {**shop.api, "Idempotency-Key": "after-promotion"}
            )
            if response.status_code == 503:
                return False
            assert response.status_code == 201, response.text
            load.sessions["after-promotion"] = loads_exact(response.content)["sessionId"]
            return True

        await eventually(created, timeout_s=CREATES_BACK_S, every_s=RETRY_PAUSE_S)


async def _fail_over(
    tmp_path: Path,
    pair: ReplicatedPair,
    receiver: WebhookReceiver,
    lose_the_primary: Callable[[], None],
) -> tuple[Load, float, float]:
    """Serve, load, lose the primary (`lose_the_primary`, in a thread) mid-load, promote the standby,
    load on, and check what must hold. The load, and the times the primary's loss began and the
    promotion ended."""
    load = Load()
    with trio.fail_after(TEST_S):
        async with serving(pair.url(), tmp_path / "payorch", _environment(receiver)) as (_, url, _):
            shop = await _shop(url, pair, tmp_path, receiver)
            stop = trio.Event()
            async with trio.open_nursery() as clients:
                for number in range(CLIENTS):
                    clients.start_soon(_client, url, shop, number, load, stop)
                await eventually(lambda: _at_least(load, CLIENTS), timeout_s=TEST_S)
                before = load.paid_and_refunded
                lost_at = trio.current_time()
                await trio.to_thread.run_sync(lose_the_primary)
                await trio.to_thread.run_sync(pair.promote_standby)
                promoted_at = trio.current_time()
                await _creates_again(url, shop, load)
                await eventually(lambda: _at_least(load, before + 2 * CLIENTS), timeout_s=TEST_S)
                stop.set()
            await _check_nothing_lost_nor_doubled(url, pair, shop, load, receiver)
            await _back_by_itself(url, pair, shop, load.sessions["after-promotion"])
    # Every 503 told the client when to retry.
    assert all(answer.retry_after for answer in load.answers if answer.status == 503)
    return load, lost_at, promoted_at


async def test_a_primary_killed_under_load_loses_nothing_and_doubles_nothing(
    replicated: ReplicatedPair, tmp_path: Path, webhook_receiver: WebhookReceiver
) -> None:
    await _fail_over(tmp_path, replicated, webhook_receiver, replicated.kill_primary)


async def test_a_planned_switchover_answers_only_503_and_only_while_there_is_no_primary(
    replicated: ReplicatedPair, tmp_path: Path, webhook_receiver: WebhookReceiver
) -> None:
    load, stopped_at, promoted_at = await _fail_over(
        tmp_path, replicated, webhook_receiver, replicated.stop_primary
    )
    errors = load.server_errors()
    assert {answer.status for answer in errors} <= {503}, errors
    # Each was in flight at some moment between the primary's stop and the standby's promotion.
    in_the_switch = [e for e in errors if stopped_at <= e.answered_at and e.sent_at <= promoted_at]
    assert in_the_switch == errors
