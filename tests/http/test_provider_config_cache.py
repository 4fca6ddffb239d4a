"""Provider configurations remembered between inbound provider events: no database read once an
application's configuration (or its absence) was read, and a change of it applied to the very next
event here, and in another process as soon as PostgreSQL's notification reaches it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from payorch.config import AuthSettings, Settings
from payorch.http.provider_config_cache import ProviderConfigCache
from payorch.runtime import Runtime
from payorch.storage import provider_configs
from payorch.storage.database import Connection, Database
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.secretbox import SecretBox
from tests.helpers import (
    Client,
    Merchant,
    another_process,
    calls_of,
    changes_heard,
    eventually,
    hears_changes,
    link_sandbox,
    new_application,
    new_merchant,
    post_sandbox_event,
)

# Long enough that only a notification, never the time limit, can make a process forget.
LONG_CACHE_S = 600.0
OTHER_KEY = "sk_sandbox_second_ZYXWVUTS9876"


def config(application_id: uuid.UUID | None = None) -> ProviderConfig:
    now = datetime.now(UTC)
    return ProviderConfig(
        application_id=application_id or uuid.uuid4(),
        provider="sandbox",
        is_active=True,
        payment_methods=["card"],
        credentials=b"sealed key",
        key_fingerprint="fp",
        webhook_reference="we_1",
        webhook_secret=b"sealed secret",
        created_at=now,
        updated_at=now,
    )


def listening_cache(ttl_s: float = 5.0, max_entries: int = 100) -> ProviderConfigCache:
    cache = ProviderConfigCache(ttl_s, max_entries)
    cache.listening = True
    return cache


def remembered(cache: ProviderConfigCache, application_id: uuid.UUID, now: float) -> Any:
    entry = cache.get(application_id, "sandbox", now)
    return "not remembered" if entry is None else entry.config


# --- The cache itself ---------------------------------------------------------------------------


def test_a_configuration_is_remembered_until_its_time_is_up() -> None:
    cache = listening_cache(ttl_s=5.0)
    found = config()
    cache.put(found.application_id, "sandbox", found, now=100.0, generation=cache.generation)
    assert remembered(cache, found.application_id, now=104.9) == found
    assert remembered(cache, found.application_id, now=105.0) == "not remembered"
    assert len(cache) == 0


def test_an_application_without_the_configuration_is_remembered_as_such() -> None:
    cache = listening_cache()
    application_id = uuid.uuid4()
    cache.put(application_id, "sandbox", None, now=100.0, generation=cache.generation)
    assert remembered(cache, application_id, now=101.0) is None
    assert remembered(cache, uuid.uuid4(), now=101.0) == "not remembered"


def test_a_read_older_than_a_forget_is_not_remembered() -> None:
    cache = listening_cache()
    found = config()
    generation = cache.generation
    cache.forget_application(found.application_id)
    cache.put(found.application_id, "sandbox", found, now=100.0, generation=generation)
    assert remembered(cache, found.application_id, now=100.0) == "not remembered"


def test_forgetting_an_application_drops_its_configurations_only() -> None:
    cache = listening_cache()
    mine, theirs = config(), config()
    for each in (mine, theirs):
        cache.put(each.application_id, "sandbox", each, now=100.0, generation=cache.generation)
    cache.put(mine.application_id, "stripe", None, now=100.0, generation=cache.generation)
    cache.forget_application(mine.application_id)
    assert len(cache) == 1
    assert remembered(cache, theirs.application_id, now=100.0) == theirs


def test_configurations_nobody_asks_for_are_dropped_in_the_sweep() -> None:
    cache = listening_cache(ttl_s=5.0)
    old, new = config(), config()
    cache.put(old.application_id, "sandbox", old, now=100.0, generation=cache.generation)
    cache.put(new.application_id, "sandbox", new, now=103.0, generation=cache.generation)
    cache.forget_expired(now=105.0)
    assert len(cache) == 1


def test_the_least_recently_used_goes_first_past_the_bound() -> None:
    cache = listening_cache(max_entries=2)
    first, second, third = config(), config(), config()
    for each in (first, second):
        cache.put(each.application_id, "sandbox", each, now=100.0, generation=cache.generation)
    assert remembered(cache, first.application_id, now=100.0) == first  # used: second is older now
    cache.put(third.application_id, "sandbox", third, now=100.0, generation=cache.generation)
    assert len(cache) == 2
    assert remembered(cache, second.application_id, now=100.0) == "not remembered"


def test_a_cache_that_is_not_listening_or_has_a_time_of_zero_remembers_nothing() -> None:
    deaf, zero = ProviderConfigCache(5.0), listening_cache(ttl_s=0.0)
    for cache in (deaf, zero):
        found = config()
        cache.put(found.application_id, "sandbox", found, now=100.0, generation=cache.generation)
        assert len(cache) == 0
        assert remembered(cache, found.application_id, now=100.0) == "not remembered"


# --- Through the service ------------------------------------------------------------------------


@pytest.fixture
def settings(settings: Settings) -> Settings:
    auth = AuthSettings(**{**settings.auth.model_dump(), "provider_config_cache_s": LONG_CACHE_S})
    return settings.model_copy(update={"auth": auth})


@pytest.fixture
async def listening(runtime: Runtime) -> None:
    await eventually(lambda: hears_changes(runtime))


@pytest.fixture
async def other_process(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    async with another_process(db, settings) as other:
        yield other


async def _event(client: Client, application_id: str, secret: str) -> int:
    return int((await post_sandbox_event(client, application_id, secret)).status_code)


async def _secret(db: Database, settings: Settings, application_id: str) -> str:
    async def read(conn: Connection) -> bytes:
        sealed = await conn.fetchval(
            "SELECT webhook_secret FROM provider_configs WHERE application_id = $1 AND provider = 'sandbox'",
            uuid.UUID(application_id),
        )
        return bytes(sealed)

    return SecretBox(settings.security.encryption_key).open(await db.autocommit(read))


async def _replace_key(client: Client, merchant: Merchant, application_id: str) -> None:
    response = await client.patch(
        f"/api/v1/applications/{application_id}/providers/sandbox/api-key",
        json={"apiKey": OTHER_KEY},
        headers=merchant.headers,
    )
    assert response.status_code == 200, await response.get_data(as_text=True)


@pytest.fixture
async def merchant(client: Client, db: Database, settings: Settings, listening: None) -> Merchant:
    return await new_merchant(client, db, settings)


async def _linked(client: Client, merchant: Merchant) -> str:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"])
    return str(application["id"])


async def test_events_of_an_application_need_one_database_read_while_its_configuration_is_unchanged(
    runtime: Runtime,
    client: Client,
    merchant: Merchant,
    db: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    application_id = await _linked(client, merchant)
    secret = await _secret(db, settings, application_id)
    await changes_heard(db, runtime.services.provider_configs)
    reads = calls_of(monkeypatch, provider_configs, "get_provider_config")
    statuses = [await _event(client, application_id, secret) for _ in range(3)]
    forged = [await _event(client, application_id, "whsec_forged") for _ in range(3)]
    assert statuses == [200] * 3
    assert forged == [400] * 3
    assert len(reads) == 1


async def test_events_for_an_application_without_the_provider_are_404_with_one_database_read(
    runtime: Runtime, client: Client, merchant: Merchant, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    application = await new_application(client, merchant)
    await changes_heard(db, runtime.services.provider_configs)
    reads = calls_of(monkeypatch, provider_configs, "get_provider_config")
    assert [await _event(client, application["id"], "whsec_forged") for _ in range(3)] == [404] * 3
    assert len(reads) == 1


async def test_an_application_linked_after_its_events_were_refused_verifies_the_next_one(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application = await new_application(client, merchant)
    assert await _event(client, application["id"], "whsec_forged") == 404  # remembered: not linked
    await link_sandbox(client, merchant, application["id"])
    assert await _event(client, application["id"], await _secret(db, settings, application["id"])) == 200


async def test_an_event_right_after_a_key_change_is_checked_against_the_new_secret(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id = await _linked(client, merchant)
    old_secret = await _secret(db, settings, application_id)
    assert await _event(client, application_id, old_secret) == 200  # remembered now
    await _replace_key(client, merchant, application_id)
    assert await _event(client, application_id, old_secret) == 400
    assert await _event(client, application_id, await _secret(db, settings, application_id)) == 200


async def test_a_key_changed_in_another_process_is_checked_here_once_postgresql_notifies_it(
    client: Client, merchant: Merchant, db: Database, settings: Settings, other_process: Runtime
) -> None:
    other = other_process.app.test_client()
    application_id = await _linked(client, merchant)
    old_secret = await _secret(db, settings, application_id)
    assert await _event(other, application_id, old_secret) == 200  # the other process remembers it
    await _replace_key(client, merchant, application_id)
    new_secret = await _secret(db, settings, application_id)

    async def verifies_the_new_secret() -> bool:
        return await _event(other, application_id, new_secret) == 200

    await eventually(verifies_the_new_secret, timeout_s=5)
    assert await _event(other, application_id, old_secret) == 400
