"""API keys remembered between requests: no database read once a key was seen, and a revoked key
(or a key of a disabled application) refused on its very next request here, and in another process
as soon as PostgreSQL's notification reaches it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from payorch.config import AuthSettings, Settings
from payorch.http.api_key_cache import ApiKeyCache
from payorch.runtime import Runtime
from payorch.storage import applications
from payorch.storage.applications import ApiKeyOwner
from payorch.storage.database import Database
from tests.helpers import (
    Client,
    Shop,
    another_process,
    calls_of,
    changes_heard,
    eventually,
    hears_changes,
    misses_remembered,
    new_shop,
)

# Long enough that only a notification, never the time limit, can make another process forget.
LONG_CACHE_S = 600.0


def owner(application_id: uuid.UUID | None = None) -> ApiKeyOwner:
    return ApiKeyOwner(
        key_id=uuid.uuid4(),
        application_id=application_id or uuid.uuid4(),
        merchant_id=uuid.uuid4(),
        application_enabled=True,
    )


def listening_cache(ttl_s: float = 5.0, max_entries: int = 100) -> ApiKeyCache:
    cache = ApiKeyCache(ttl_s, max_entries)
    cache.listening = True
    return cache


# --- The cache itself ---------------------------------------------------------------------------


def test_a_remembered_key_is_answered_until_its_time_is_up() -> None:
    cache = listening_cache(ttl_s=5.0)
    cache.put(b"k", found := owner(), now=100.0, generation=cache.generation)
    assert cache.get(b"k", now=104.9) == found
    assert cache.get(b"k", now=105.0) is None
    assert len(cache) == 0


def test_keys_nobody_looks_up_are_dropped_once_their_time_is_up() -> None:
    cache = listening_cache(ttl_s=5.0)
    cache.put(b"old", owner(), now=100.0, generation=cache.generation)
    cache.put(b"new", fresh := owner(), now=103.0, generation=cache.generation)
    cache.forget_expired(now=105.0)
    assert len(cache) == 1
    assert cache.get(b"new", now=105.0) == fresh


def test_a_lookup_older_than_a_forget_is_not_remembered() -> None:
    cache = listening_cache()
    found = owner()
    generation = cache.generation  # the lookup starts ...
    cache.forget_application(found.application_id)  # ... a revocation commits meanwhile ...
    cache.put(b"k", found, now=0.0, generation=generation)  # ... and its (stale) answer arrives
    assert cache.get(b"k", now=0.0) is None


def test_forgetting_an_application_drops_its_keys_only() -> None:
    cache = listening_cache()
    mine, theirs = owner(), owner()
    cache.put(b"mine", mine, now=0.0, generation=cache.generation)
    cache.put(b"theirs", theirs, now=0.0, generation=cache.generation)
    cache.forget_application(mine.application_id)
    assert (cache.get(b"mine", now=0.0), cache.get(b"theirs", now=0.0)) == (None, theirs)


def test_a_cache_that_is_not_listening_answers_nothing() -> None:
    cache = ApiKeyCache(5.0)
    cache.put(b"k", owner(), now=0.0, generation=cache.generation)
    cache.listening = True
    assert cache.get(b"k", now=0.0) is None


def test_the_least_recently_used_key_goes_first_past_the_bound() -> None:
    cache = listening_cache(max_entries=2)
    for name in (b"a", b"b"):
        cache.put(name, owner(), now=0.0, generation=cache.generation)
    cache.get(b"a", now=0.0)
    cache.put(b"c", owner(), now=0.0, generation=cache.generation)
    assert [cache.get(name, now=0.0) is not None for name in (b"a", b"b", b"c")] == [True, False, True]


def test_a_time_of_zero_remembers_nothing() -> None:
    cache = listening_cache(ttl_s=0)
    cache.put(b"k", owner(), now=0.0, generation=cache.generation)
    assert cache.get(b"k", now=0.0) is None


def test_an_unknown_key_is_remembered_until_its_own_time_is_up() -> None:
    cache = ApiKeyCache(600.0, miss_ttl_s=2.0)
    cache.listening = True
    cache.put_missing(b"bad", now=100.0, generation=cache.generation)
    assert cache.is_missing(b"bad", now=101.9)
    assert not cache.is_missing(b"bad", now=102.0)
    assert misses_remembered(cache) == 0


def test_unknown_keys_are_bounded_apart_from_active_ones() -> None:
    cache = ApiKeyCache(600.0, max_entries=2, miss_ttl_s=60.0)
    cache.listening = True
    cache.put(b"good", found := owner(), now=0.0, generation=cache.generation)
    for number in range(10):
        cache.put_missing(bytes([number]), now=float(number), generation=cache.generation)
    assert misses_remembered(cache) == 2
    assert [cache.is_missing(bytes([n]), now=10.0) for n in (7, 8, 9)] == [False, True, True]
    assert cache.get(b"good", now=10.0) == found  # a flood of bad keys pushes no good one out


def test_unknown_keys_nobody_asks_for_again_are_dropped_in_the_sweep() -> None:
    cache = ApiKeyCache(600.0, miss_ttl_s=2.0)
    cache.listening = True
    cache.put_missing(b"old", now=100.0, generation=cache.generation)
    cache.put_missing(b"new", now=101.0, generation=cache.generation)
    cache.forget_expired(now=102.5)
    assert misses_remembered(cache) == 1
    assert cache.is_missing(b"new", now=102.5)


def test_any_change_of_an_application_forgets_every_unknown_key() -> None:
    cache = ApiKeyCache(600.0, miss_ttl_s=60.0)
    cache.listening = True
    generation = cache.generation  # a lookup starts ...
    cache.put_missing(b"before", now=0.0, generation=generation)
    cache.forget_application(uuid.uuid4())  # ... a key is created somewhere ...
    cache.put_missing(b"late", now=0.0, generation=generation)  # ... and a stale miss arrives
    assert misses_remembered(cache) == 0


def test_unknown_keys_are_not_remembered_while_not_listening_or_with_a_time_of_zero() -> None:
    deaf = ApiKeyCache(600.0, miss_ttl_s=60.0)
    deaf.put_missing(b"bad", now=0.0, generation=deaf.generation)
    off = ApiKeyCache(600.0, miss_ttl_s=0.0)
    off.listening = True
    off.put_missing(b"bad", now=0.0, generation=off.generation)
    assert (misses_remembered(deaf), misses_remembered(off)) == (0, 0)


# --- Through the service ------------------------------------------------------------------------


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"auth": AuthSettings(**{**settings.auth.model_dump(), "api_key_cache_s": LONG_CACHE_S})}
    )


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings, runtime: Runtime) -> Shop:
    await eventually(lambda: hears_changes(runtime))
    return await new_shop(client, db, settings)


@pytest.fixture
async def other_process(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    async with another_process(db, settings) as other:
        yield other


async def status_of(client: Client, shop: Shop) -> int:
    response = await client.get("/api/v1/payment-methods?currency=PLN&amount=10.00", headers=shop.headers)
    return int(response.status_code)


async def test_a_key_seen_once_needs_no_database_read(
    runtime: Runtime, client: Client, db: Database, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    await changes_heard(db, runtime.services.api_keys)
    assert await status_of(client, shop) == 200
    reads = calls_of(monkeypatch, applications, "find_api_key_owner")
    assert [await status_of(client, shop) for _ in range(3)] == [200] * 3
    assert reads == []


async def test_a_revoked_key_is_401_on_its_very_next_request(client: Client, shop: Shop) -> None:
    assert await status_of(client, shop) == 200  # remembered now
    await _revoke_every_key(client, shop)
    assert await status_of(client, shop) == 401


async def test_a_key_of_a_disabled_application_is_403_on_its_very_next_request(
    client: Client, shop: Shop
) -> None:
    assert await status_of(client, shop) == 200
    await _set_enabled(client, shop, enabled=False)
    assert await status_of(client, shop) == 403
    await _set_enabled(client, shop, enabled=True)
    assert await status_of(client, shop) == 200


async def test_a_key_revoked_in_another_process_is_refused_here_once_postgresql_notifies_it(
    client: Client, shop: Shop, other_process: Runtime
) -> None:
    other = other_process.app.test_client()
    assert await status_of(other, shop) == 200  # the other process remembers the key
    await _revoke_every_key(client, shop)
    await eventually(lambda: _refused(other, shop, 401), timeout_s=5)


async def test_an_application_disabled_in_another_process_is_refused_here_once_postgresql_notifies_it(
    client: Client, shop: Shop, other_process: Runtime
) -> None:
    other = other_process.app.test_client()
    assert await status_of(other, shop) == 200
    await _set_enabled(client, shop, enabled=False)
    await eventually(lambda: _refused(other, shop, 403), timeout_s=5)


async def _refused(client: Client, shop: Shop, status: int) -> bool:
    return await status_of(client, shop) == status


async def _revoke_every_key(client: Client, shop: Shop) -> None:
    path = f"/api/v1/applications/{shop.application_id}/api-keys"
    keys = (await (await client.get(path, headers=shop.merchant.headers)).get_json())["items"]
    for key in keys:
        response = await client.delete(f"{path}/{key['id']}", headers=shop.merchant.headers)
        assert response.status_code == 200


async def _set_enabled(client: Client, shop: Shop, *, enabled: bool) -> None:
    response = await client.patch(
        f"/api/v1/applications/{shop.application_id}/status",
        json={"isEnabled": enabled},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
