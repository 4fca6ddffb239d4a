"""Building blocks for tests: invited merchants, their tokens, applications and API keys."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import trio
from quart.typing import TestClientProtocol as Client

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.engine.payments.events import apply_session_event
from payorch.engine.payments.states import SessionEvent
from payorch.engine.provider_health import ProviderAccount, ProviderFigures, ProviderHealth
from payorch.http.api_key_cache import ApiKeyCache
from payorch.http.services import PayorchApp
from payorch.jsonexact import dumps_exact
from payorch.providers.sandbox.signing import SIGNATURE_HEADER, signature_header
from payorch.runtime import Runtime, open_runtime
from payorch.storage.application_changes import notify_application_changed
from payorch.storage.database import Connection, Database, open_database

T = TypeVar("T")

PASSWORD = "correct-horse-battery"  # 21 characters: inside 16..32
_numbers = itertools.count(1)


def signup_body(email: str, registration_number: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "organization": {
            "legalBusinessName": "Acme Widgets Ltd",
            "companyRegistrationNumber": registration_number,
            "registeredAddress": {
                "line1": "1 Market Street",
                "line2": "Floor 2",
                "city": "Warsaw",
                "state": "Mazowieckie",
                "postalCode": "00-001",
                "country": "PL",
            },
            "companyWebsite": "https://acme.example",
            "industry": "Retail",
            "sector": "E-commerce",
            "contactPersonFirstName": "Ada",
            "contactPersonLastName": "Lovelace",
            "contactPersonEmail": "ada@acme.example",
        },
        "admin": {"email": email, "password": password, "firstName": "Ada", "lastName": "Lovelace"},
    }


@dataclass(frozen=True)
class Merchant:
    email: str
    access_token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}


async def new_merchant(client: Client, db: Database, settings: Settings) -> Merchant:
    """A merchant signed up through an invite and logged in."""
    number = next(_numbers)
    email = f"admin{number}@merchant{number}.example"
    invite = await issue_invite(db, settings, email)
    response = await client.post(
        f"/api/v1/merchants/signup?token={invite.token}", json=signup_body(email, f"REG-{number:06d}")
    )
    assert response.status_code == 201, await response.get_data()
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, await response.get_data()
    return Merchant(email=email, access_token=(await response.get_json())["accessToken"])


async def new_application(client: Client, merchant: Merchant, name: str = "Shop") -> dict[str, Any]:
    response = await client.post("/api/v1/applications", json={"name": name}, headers=merchant.headers)
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


async def new_api_key(client: Client, merchant: Merchant, application_id: str) -> dict[str, Any]:
    response = await client.post(
        f"/api/v1/applications/{application_id}/api-keys",
        json={"description": "server"},
        headers=merchant.headers,
    )
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


SANDBOX_KEY = "sk_sandbox_test_0123456789"
# The sessions' statements now running `pg_sleep(60)` (tests that hold a statement on the server):
# active ones only, for a pooled connection keeps its last statement's text while idle (the pool
# sends no reset query), so one whose sleep was cancelled still shows it until reused.
SLEEPING_A_MINUTE = (
    "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(60)%'"
    " AND pid <> pg_backend_pid()"
)


async def link_sandbox(
    client: Client, merchant: Merchant, application_id: str, methods: tuple[str, ...] = ("card", "blik")
) -> dict[str, Any]:
    response = await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json={"name": "sandbox", "paymentMethods": list(methods), "credentials": {"apiKey": SANDBOX_KEY}},
        headers=merchant.headers,
    )
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


def session_body(
    total: str = "100.00", currency: str = "PLN", method: str = "card", **extra: Any
) -> dict[str, Any]:
    from decimal import Decimal

    body: dict[str, Any] = {
        "orderReference": "order-1001",
        "paymentMethod": method,
        "currency": currency,
        "amount": {"total": Decimal(total), "shipping": Decimal("0"), "tax": Decimal("0")},
        "customer": {"email": "buyer@example.com", "firstName": "Jan", "lastName": "Kowalski"},
    }
    body.update(extra)
    return body


@dataclass(frozen=True)
class Shop:
    """A merchant with one application linked to the sandbox, and an API key for it."""

    merchant: Merchant
    application_id: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}


async def new_shop(client: Client, db: Database, settings: Settings) -> Shop:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"])
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


async def post_json(client: Client, path: str, body: Any, headers: dict[str, str]) -> Any:
    """POST `body` as exact JSON (Decimal amounts as JSON numbers, as a merchant's client sends them)."""
    return await client.post(
        path, data=dumps_exact(body), headers={**headers, "Content-Type": "application/json"}
    )


async def create_session(client: Client, shop: Shop, key: str, body: dict[str, Any] | None = None) -> Any:
    return await post_json(
        client, "/api/v1/sessions", body or session_body(), {**shop.headers, "Idempotency-Key": key}
    )


async def put_routing(client: Client, shop: Shop, document: dict[str, Any]) -> dict[str, Any]:
    """Store `document` as the shop's routing document; the answer (with its `version`)."""
    response = await client.put(
        f"/api/v1/applications/{shop.application_id}/routing",
        data=dumps_exact(document),
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def prefer(client: Client, shop: Shop, *providers: str) -> dict[str, Any]:
    """Route every session of the shop to `providers` in this order (a priority default route)."""
    return await put_routing(client, shop, {"default": {"type": "priority", "providers": list(providers)}})


async def eventually(
    check: Callable[[], Awaitable[T | None]], timeout_s: float = 10.0, *, every_s: float = 0.05
) -> T:
    """Poll `check` every `every_s` until it returns something other than None (or False), and return
    that; `trio.TooSlowError` after `timeout_s`."""
    with trio.fail_after(timeout_s):
        while True:
            result = await check()
            if result is not None and result is not False:
                return result
            await trio.sleep(every_s)


def eventually_blocking(
    check: Callable[[], T | None], timeout_s: float = 10.0, *, every_s: float = 0.05
) -> T:
    """`eventually` for code that runs outside Trio (a schemathesis hook, a plain thread): the same
    polls, blocking the thread between them."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise trio.TooSlowError(f"not done within {timeout_s} s")
        time.sleep(every_s)


async def expire_now(db: Database, session_id: str) -> None:
    """Move the session's expiry into the past: the expiry supervisor takes it within half a second."""

    async def backdate(conn: Connection) -> None:
        await conn.execute(
            "UPDATE checkout_sessions SET expires_at = now() - interval '1 second' WHERE id = $1",
            uuid.UUID(session_id),
        )

    await db.transaction(backdate)


async def lose_dispute(app: PayorchApp, db: Database, shop: Shop, session_id: str) -> None:
    """Apply a lost dispute to the shop's session, as a provider's event would once verified."""

    async def lose(conn: Connection) -> bool:
        return await apply_session_event(
            conn,
            application_id=uuid.UUID(shop.application_id),
            session_id=uuid.UUID(session_id),
            event=SessionEvent.DISPUTE_LOST,
            metrics=app.services.context.metrics,
            now=app.services.context.clock.now(),
        )

    assert await db.transaction(lose)


async def drop_database(dsn: str) -> None:
    """Drop the database `dsn` names, terminating every connection to it: the database is gone."""
    parts = urlsplit(dsn)

    async def drop(conn: Connection) -> None:
        await conn.execute(f"DROP DATABASE {parts.path.lstrip('/')} WITH (FORCE)")

    async with open_database(urlunsplit(parts._replace(path="/postgres")), min_size=1, max_size=1) as server:
        await server.autocommit(drop)


def account_figures(health: ProviderHealth, key: ProviderAccount, now: float) -> ProviderFigures | None:
    """The figures routing keeps of one account, as `ProviderHealth.snapshot` gives a provider's;
    None when none are kept. Hands out no probe."""
    record = health._accounts.get(key)
    return None if record is None else health._figures(record, now)


def misses_remembered(cache: ApiKeyCache) -> int:
    """How many unknown keys `cache` remembers."""
    return len(cache._misses)


async def post_sandbox_event(client: Client, application_id: str, secret: str) -> Any:
    """An authentic-looking sandbox event that payorch has no use for, signed with `secret`, posted
    to the application's sandbox event route; the response."""
    body = json.dumps(
        {
            "id": f"evt_sbx_{uuid.uuid4().hex}",
            "type": "account.updated",
            "created": int(time.time()),
            "data": {},
        }
    ).encode()
    return await client.post(
        f"/api/v1/provider-events/sandbox/{application_id}",
        data=body,
        headers={
            SIGNATURE_HEADER: signature_header(secret, body, int(time.time())),
            "Content-Type": "application/json",
        },
    )


class HearsChanges(Protocol):
    listening: bool
    generation: int  # moves on with every change heard


async def changes_heard(db: Database, cache: HearsChanges) -> None:
    """Every change notification committed so far (a test's own setup notifies too, and each makes
    `cache` forget its application) has reached `cache`: sends one more, about an application
    nobody has, and waits for the cache to hear it, since notifications arrive in commit order."""
    before = cache.generation

    async def notify(conn: Connection) -> None:
        await notify_application_changed(conn, uuid.uuid4())

    async def heard() -> bool:
        return cache.generation > before

    await db.transaction(notify)
    await eventually(heard)


@asynccontextmanager
async def another_process(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    """A second runtime on the same database, as another payorch process would be, once it hears
    every change of an application."""
    async with open_runtime(settings, db) as other:
        await eventually(lambda: hears_changes(other))
        yield other


async def hears_changes(runtime: Runtime) -> bool:
    """Whether the runtime's caches hear every change of an application (else they keep nothing)."""
    return runtime.services.api_keys.listening and runtime.services.provider_configs.listening


def calls_of(monkeypatch: Any, module: Any, name: str) -> list[Any]:
    """The arguments of every call of the coroutine function `module.name` from now on (it still
    runs), in order; `monkeypatch` puts it back after the test."""
    calls: list[Any] = []
    original = getattr(module, name)

    async def counted(*args: Any) -> Any:
        calls.append(args)
        return await original(*args)

    monkeypatch.setattr(module, name, counted)
    return calls
