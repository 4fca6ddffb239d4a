"""What one merchant can cost the others: a bucket over all of a merchant's API keys, caps on its
applications and active keys, its list reads in flight, and failed API-key authentications per
client address, each answered in the documented shapes (429 with `retryAfter`, 409 for a cap).

Merchants and keys are set up through the ordinary app (`client`); the limits are tested on a
second app over the same database (`limited`) whose limits are small and refill slowly."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import trio
from quart import Response

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.access_tokens import verify_access_token
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database
from tests.helpers import (
    Client,
    Merchant,
    Shop,
    eventually,
    misses_remembered,
    new_api_key,
    new_application,
    new_shop,
)
from tests.http.test_rate_limits import get_session_with, too_many_requests

KEY_BURST = 3
MERCHANT_BURST = 4
FAILED_KEYS = 3
SMALL = LimitSettings(
    requests_per_second=0.1,
    burst=KEY_BURST,
    merchant_requests_per_second=0.1,
    merchant_burst=MERCHANT_BURST,
    failed_api_keys_per_address_per_minute=FAILED_KEYS,
    merchant_list_reads=1,
    merchant_list_read_wait_s=0.2,
)
CAPPED = LimitSettings(applications_per_merchant=2, active_api_keys_per_application=2)
UNKNOWN_KEY = "sk_" + "U" * 40


@pytest.fixture
async def limited_runtime(settings: Settings, db: Database, shop: Shop) -> AsyncIterator[Runtime]:
    """The app with small limits, started once `shop` is made: the changes of its setup are
    never heard of by this app (it listens from after them), so none can come late and make it
    forget a key it looked up in the test."""
    async with open_runtime(settings.model_copy(update={"limits": SMALL}), db) as runtime:
        await eventually(lambda: _listening(runtime))
        yield runtime


async def _listening(runtime: Runtime) -> bool:
    return runtime.services.api_keys.listening


@pytest.fixture
async def capped(settings: Settings, db: Database) -> AsyncIterator[Client]:
    """A client of an app whose merchants may have 2 applications, each with 2 active keys."""
    async with open_runtime(settings.model_copy(update={"limits": CAPPED}), db) as runtime:
        yield runtime.app.test_client()


@pytest.fixture
def limited(limited_runtime: Runtime) -> Client:
    return limited_runtime.app.test_client()


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def merchant_id(merchant: Merchant, settings: Settings) -> uuid.UUID:
    """The merchant's id, as its access token names it."""
    claims = verify_access_token(
        merchant.access_token, secret=settings.auth.jwt_secret, now=datetime.now(UTC)
    )
    return claims.merchant_id


async def conflict(response: Response) -> dict[str, Any]:
    assert response.status_code == 409, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    assert set(body) == {"error", "message", "code"}
    assert (body["error"], body["code"]) == ("Conflict", 409)
    return body


def from_address(address: str) -> dict[str, Any]:
    return {"client": (address, 40000)}


# --- One bucket over all of a merchant's API keys ----------------------------------------------


async def test_api_keys_of_one_merchant_share_the_merchants_bucket(
    limited: Client, client: Client, db: Database, settings: Settings, shop: Shop
) -> None:
    second = {"X-API-Key": (await new_api_key(client, shop.merchant, shop.application_id))["key"]}
    other = await new_shop(client, db, settings)
    for _ in range(KEY_BURST):
        assert (await get_session_with(limited, shop.headers)).status_code == 404
    for _ in range(MERCHANT_BURST - KEY_BURST):
        assert (await get_session_with(limited, second)).status_code == 404
    body = await too_many_requests(await get_session_with(limited, second))
    assert "merchant" in body["message"]
    assert (await get_session_with(limited, other.headers)).status_code == 404


async def test_a_request_the_merchants_bucket_refuses_takes_no_token_of_its_key(
    limited: Client, client: Client, shop: Shop
) -> None:
    keys = [{"X-API-Key": (await new_api_key(client, shop.merchant, shop.application_id))["key"]}]
    keys.append(shop.headers)
    for number in range(MERCHANT_BURST):
        assert (await get_session_with(limited, keys[0] if number < 2 else keys[1])).status_code == 404
    # The merchant's bucket is empty; the second key has a token left, and keeps it.
    await too_many_requests(await get_session_with(limited, keys[1]))
    assert "merchant" in (await too_many_requests(await get_session_with(limited, keys[1])))["message"]


# --- Caps on applications and active keys ------------------------------------------------------


async def test_an_application_beyond_the_merchants_cap_is_409_and_not_made(
    capped: Client, merchant: Merchant
) -> None:
    for number in range(CAPPED.applications_per_merchant):
        response = await capped.post(
            "/api/v1/applications", json={"name": f"Shop {number}"}, headers=merchant.headers
        )
        assert response.status_code == 201
    body = await conflict(
        await capped.post("/api/v1/applications", json={"name": "One more"}, headers=merchant.headers)
    )
    assert "applications" in body["message"]
    listed = await (await capped.get("/api/v1/applications", headers=merchant.headers)).get_json()
    assert listed["totalItems"] == CAPPED.applications_per_merchant


async def test_an_active_key_beyond_the_cap_is_409_until_one_is_revoked(
    capped: Client, merchant: Merchant
) -> None:
    application_id = (await new_application(capped, merchant))["id"]
    path = f"/api/v1/applications/{application_id}/api-keys"
    made = [await new_api_key(capped, merchant, application_id) for _ in range(2)]
    body = await conflict(await capped.post(path, json={}, headers=merchant.headers))
    assert "revoke" in body["message"]
    response = await capped.delete(f"{path}/{made[0]['id']}", headers=merchant.headers)
    assert response.status_code == 200
    assert (await capped.post(path, json={}, headers=merchant.headers)).status_code == 201


# --- List reads in flight per merchant -----------------------------------------------------------


async def test_a_merchants_list_read_waits_for_its_turn_then_is_429_while_others_list(
    limited: Client, limited_runtime: Runtime, client: Client, db: Database, settings: Settings, shop: Shop
) -> None:
    other = await new_shop(client, db, settings)
    sessions_of = f"/api/v1/applications/{shop.application_id}/sessions"
    async with limited_runtime.services.limits.list_read(merchant_id(shop.merchant, settings)):
        # The merchant's only list read is held (a slow page, say): its next one waits, then 429.
        await too_many_requests(await limited.get(sessions_of, headers=shop.merchant.headers))
        others = f"/api/v1/applications/{other.application_id}/sessions"
        assert (await limited.get(others, headers=other.merchant.headers)).status_code == 200
    assert (await limited.get(sessions_of, headers=shop.merchant.headers)).status_code == 200
    assert len(limited_runtime.services.limits.list_reads) == 0


async def test_a_list_read_waiting_for_its_turn_gets_it_when_one_ends(
    limited: Client, limited_runtime: Runtime, settings: Settings, shop: Shop
) -> None:
    answered: list[int] = []
    path = f"/api/v1/applications/{shop.application_id}/sessions"

    async def list_sessions() -> None:
        answered.append((await limited.get(path, headers=shop.merchant.headers)).status_code)

    held = limited_runtime.services.limits.list_read(merchant_id(shop.merchant, settings))
    async with trio.open_nursery() as nursery, held:
        nursery.start_soon(list_sessions)
        await trio.sleep(0.05)  # well inside the 0.2 s it may wait
        assert answered == []
    assert answered == [200]


# --- Failed API-key authentications per client address -----------------------------------------


async def test_failed_api_keys_from_one_address_are_429_past_the_limit_before_any_read(
    limited: Client, limited_runtime: Runtime, shop: Shop
) -> None:
    cache = limited_runtime.services.api_keys
    for number in range(FAILED_KEYS):
        bad = {"X-API-Key": f"sk_{number:040d}"}
        response = await limited.get(
            "/api/v1/sessions/00000000-0000-4000-8000-000000000000",
            headers=bad,
            scope_base=from_address("203.0.113.7"),
        )
        assert response.status_code == 401
    misses = misses_remembered(cache)
    # Out of failures: a key the cache does not hold is refused before the database is asked ...
    response = await limited.get(
        "/api/v1/sessions/00000000-0000-4000-8000-000000000000",
        headers={"X-API-Key": UNKNOWN_KEY},
        scope_base=from_address("203.0.113.7"),
    )
    await too_many_requests(response)
    assert misses_remembered(cache) == misses  # nothing was looked up
    # ... while another address is served, and its valid key, once remembered, works everywhere.
    response = await limited.get(
        "/api/v1/sessions/00000000-0000-4000-8000-000000000000",
        headers=shop.headers,
        scope_base=from_address("198.51.100.1"),
    )
    assert response.status_code == 404
    response = await limited.get(
        "/api/v1/sessions/00000000-0000-4000-8000-000000000000",
        headers=shop.headers,
        scope_base=from_address("203.0.113.7"),
    )
    assert response.status_code == 404


async def test_failed_api_keys_from_one_ipv6_64_share_one_budget(
    limited: Client, limited_runtime: Runtime, shop: Shop
) -> None:
    path = "/api/v1/sessions/00000000-0000-4000-8000-000000000000"
    for number in range(FAILED_KEYS):  # a new address of one /64 for each failure
        response = await limited.get(
            path,
            headers={"X-API-Key": f"sk_{number:040d}"},
            scope_base=from_address(f"2001:db8:7:7::{number + 1}"),
        )
        assert response.status_code == 401
    response = await limited.get(
        path, headers={"X-API-Key": UNKNOWN_KEY}, scope_base=from_address("2001:db8:7:7:ffff::1")
    )
    await too_many_requests(response)
    # Another /64 has a budget of its own.
    response = await limited.get(
        path, headers={"X-API-Key": UNKNOWN_KEY}, scope_base=from_address("2001:db8:7:8::1")
    )
    assert response.status_code == 401


async def test_an_unknown_key_is_looked_up_once_while_remembered(
    limited: Client, limited_runtime: Runtime, client: Client, shop: Shop
) -> None:
    cache = limited_runtime.services.api_keys
    unknown = {"X-API-Key": UNKNOWN_KEY}

    async def remembered() -> bool:
        # The fixtures' own changes (the shop's application and key) reach this process's listener
        # a moment later, and each makes it forget its misses: until they have, ask again.
        assert (await get_session_with(limited, unknown)).status_code == 401
        return misses_remembered(cache) == 1

    await eventually(remembered)
    assert (await get_session_with(limited, unknown)).status_code == 401
    assert misses_remembered(cache) == 1
    # A key created anywhere makes every process forget what it remembered as unknown.
    await new_api_key(client, shop.merchant, shop.application_id)
    await eventually(lambda: _no_misses(limited_runtime))


async def _no_misses(runtime: Runtime) -> bool:
    return misses_remembered(runtime.services.api_keys) == 0


async def test_a_key_just_created_in_one_process_works_at_once_in_another(
    limited: Client, client: Client, shop: Shop
) -> None:
    for _ in range(2):  # whatever the other process remembered of unknown keys
        assert (await get_session_with(limited, {"X-API-Key": UNKNOWN_KEY})).status_code == 401
    created = await new_api_key(client, shop.merchant, shop.application_id)
    assert (await get_session_with(limited, {"X-API-Key": created["key"]})).status_code == 404


async def test_requests_a_little_over_the_rate_are_paced_to_it_not_refused(
    shop: Shop, settings: Settings, db: Database
) -> None:
    paced = LimitSettings(requests_per_second=20, burst=1, merchant_requests_per_second=20, merchant_burst=1)
    async with open_runtime(settings.model_copy(update={"limits": paced}), db) as runtime:
        client = runtime.app.test_client()
        # A burst of one, then four more at once: each of those waits for its token (50 ms apart).
        answers = [await get_session_with(client, shop.headers) for _ in range(5)]
    assert [a.status_code for a in answers] == [404] * 5  # all served (no such session), none refused
