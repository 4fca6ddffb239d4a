"""Reloading the configuration while serving (`Runtime.reload`, and `service.reload_when_asked` as
SIGHUP drives it): what a reload changes at the next request, what it keeps until a restart, and a
file that does not validate, which changes nothing. `payorch serve` under SIGHUP, with requests
streaming, is tested in tests/test_reload_process.py."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import trio

from payorch.config import ConfigError, Settings, load_settings
from payorch.runtime import Runtime, open_runtime
from payorch.service import reload_when_asked
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.helpers import Client, Merchant, Shop, create_session, new_api_key, new_merchant, new_shop
from tests.test_metrics import scrape, value

UNKNOWN_SESSION = "/api/v1/sessions/00000000-0000-4000-8000-000000000000"


def changed(settings: Settings, section: str, **values: Any) -> Settings:
    """`settings` with `values` in `[section]` (a dotted section such as providers.stripe too)."""
    if "." in section:
        outer, inner = section.split(".")
        parent = getattr(settings, outer)
        updated = getattr(parent, inner).model_copy(update=values)
        return settings.model_copy(update={outer: parent.model_copy(update={inner: updated})})
    return settings.model_copy(update={section: getattr(settings, section).model_copy(update=values)})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


@pytest.fixture
async def merchant(client: Client, db: Database, settings: Settings) -> Merchant:
    return await new_merchant(client, db, settings)


async def test_a_lowered_rate_limit_holds_from_the_next_request(
    client: Client, runtime: Runtime, settings: Settings, shop: Shop
) -> None:
    for _ in range(5):  # well within the configured burst of 100
        assert (await client.get(UNKNOWN_SESSION, headers=shop.headers)).status_code == 404
    runtime.reload(changed(settings, "limits", requests_per_second=0.01, burst=2))
    statuses = [(await client.get(UNKNOWN_SESSION, headers=shop.headers)).status_code for _ in range(3)]
    assert statuses == [404, 404, 429]
    assert runtime.services.context.settings.limits.burst == 2


async def test_a_raised_rate_limit_refills_at_its_new_rate(
    client: Client, runtime: Runtime, settings: Settings, shop: Shop
) -> None:
    runtime.reload(changed(settings, "limits", requests_per_second=0.01, burst=1))
    assert (await client.get(UNKNOWN_SESSION, headers=shop.headers)).status_code == 404
    assert (await client.get(UNKNOWN_SESSION, headers=shop.headers)).status_code == 429
    runtime.reload(changed(settings, "limits", requests_per_second=1000.0, burst=1))
    await trio.sleep(0.01)  # 10 tokens' worth at the new rate: the bucket holds its burst of 1 again
    assert (await client.get(UNKNOWN_SESSION, headers=shop.headers)).status_code == 404


async def test_enabling_and_disabling_a_provider_changes_the_catalogue(
    client: Client, runtime: Runtime, settings: Settings, merchant: Merchant
) -> None:
    async def offered() -> list[str]:
        response = await client.get("/api/v1/providers", headers=merchant.headers)
        assert response.status_code == 200
        return [item["name"] for item in (await response.get_json())["items"]]

    assert await offered() == ["sandbox"]
    with_stripe = changed(settings, "providers.stripe", enabled=True, api_base="http://127.0.0.1:9")
    runtime.reload(with_stripe)
    assert await offered() == ["sandbox", "stripe"]
    stripe = runtime.services.context.providers.get("stripe")
    sandbox = runtime.services.context.providers.get("sandbox")

    runtime.reload(changed(with_stripe, "providers.mollie", enabled=True))
    assert await offered() == ["mollie", "sandbox", "stripe"]
    # Adapters whose section did not change stay as they are (with their connections).
    assert runtime.services.context.providers.get("stripe") is stripe
    assert runtime.services.context.providers.get("sandbox") is sandbox

    runtime.reload(changed(with_stripe, "providers.stripe", timeout_s=3.0))
    assert runtime.services.context.providers.get("stripe") is not stripe  # a changed section: a new adapter

    runtime.reload(settings)
    assert await offered() == ["sandbox"]


async def test_new_sessions_take_the_reloaded_ttl(
    client: Client, runtime: Runtime, settings: Settings, shop: Shop
) -> None:
    async def ttl_of_a_new_session(key: str) -> float:
        response = await create_session(client, shop, key)
        assert response.status_code == 201, await response.get_data(as_text=True)
        body = await response.get_json()
        created = datetime.fromisoformat(body["createdAt"])
        return (datetime.fromisoformat(body["expiresAt"]) - created).total_seconds()

    assert await ttl_of_a_new_session("before") == pytest.approx(settings.sessions.ttl_s, abs=1)
    runtime.reload(changed(settings, "sessions", ttl_s=120))
    assert await ttl_of_a_new_session("after") == pytest.approx(120, abs=1)


async def test_restart_only_keys_keep_their_running_value_in_one_log_line(
    runtime: Runtime, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    loaded = changed(settings, "server", bind="127.0.0.1:1", state_dir=Path("/elsewhere"))
    loaded = changed(loaded, "database", pool_max=9)
    loaded = changed(loaded, "auth", jwt_secret="another-secret-of-at-least-32-characters", jwt_ttl_s=60)
    loaded = changed(loaded, "providers.sandbox", enabled=False)
    with caplog.at_level(logging.INFO, logger="payorch.runtime"):
        runtime.reload(loaded)
    running = runtime.services.context.settings
    assert running.server == settings.server
    assert running.database == settings.database
    assert running.auth.jwt_secret == settings.auth.jwt_secret
    assert running.providers.sandbox.enabled
    assert runtime.services.context.providers.get("sandbox") is not None
    assert running.auth.jwt_ttl_s == 60  # live keys beside them take effect
    (kept,) = [record for record in caplog.records if hasattr(record, "restartOnly")]
    assert kept.levelno == logging.WARNING
    assert kept.restartOnly == [
        "server.bind",
        "server.state_dir",
        "database.pool_max",
        "auth.jwt_secret",
        "providers.sandbox.enabled",
    ]
    assert "another-secret" not in caplog.text  # keys are named, values never shown
    (reloaded,) = [record for record in caplog.records if record.getMessage() == "configuration reloaded"]
    assert reloaded.changed == ["auth.jwt_ttl_s"]


async def test_metrics_show_the_generation_and_the_time_of_the_last_reload(
    client: Client, runtime: Runtime, settings: Settings, clock: ShiftedClock
) -> None:
    _, samples = await scrape(client)
    assert value(samples, "payorch_config_generation") == 1
    started_at = value(samples, "payorch_config_last_reload_timestamp_seconds")
    clock.advance(3600)
    runtime.reload(changed(settings, "sessions", ttl_s=120))
    _, samples = await scrape(client)
    assert value(samples, "payorch_config_generation") == 2
    assert value(samples, "payorch_config_last_reload_timestamp_seconds") >= started_at + 3600


async def test_a_file_that_does_not_validate_changes_nothing(
    client: Client, runtime: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "reloaded.toml"
    path.write_text("[limits]\nburst = 0\n")
    before = runtime.services.context.settings
    asked, requests = trio.open_memory_channel[None](1)
    async with asked:
        asked.send_nowait(None)
    with caplog.at_level(logging.INFO):
        await reload_when_asked(runtime, requests, lambda: load_settings(path, ensure_secrets=False))
    assert runtime.services.context.settings is before
    (refused,) = [record for record in caplog.records if "not reloaded" in record.getMessage()]
    assert refused.levelno == logging.ERROR
    assert refused.key == "limits.burst"
    assert "limits.burst" in refused.error
    _, samples = await scrape(client)
    assert value(samples, "payorch_config_generation") == 1
    assert value(samples, "payorch_config_reload_failures_total") == 1


async def test_sighups_apply_in_order(runtime: Runtime, settings: Settings) -> None:
    ttls = iter([111, 222, 333])
    asked, requests = trio.open_memory_channel[None](3)
    async with asked:
        for _ in range(3):
            asked.send_nowait(None)
    await reload_when_asked(runtime, requests, lambda: changed(settings, "sessions", ttl_s=next(ttls)))
    assert runtime.services.context.settings.sessions.ttl_s == 333
    assert runtime.services.context.live.generation == 4


async def test_changed_webhook_settings_replace_the_test_send_client(
    runtime: Runtime, settings: Settings
) -> None:
    before = runtime.services.webhooks
    runtime.reload(changed(settings, "sessions", ttl_s=120))
    assert runtime.services.webhooks is before  # `webhooks.*` unchanged: the same client
    runtime.reload(changed(settings, "webhooks", timeout_s=2.5))
    assert runtime.services.webhooks is not before
    assert runtime.services.webhooks.timeout.read == 2.5


async def test_an_unreadable_ca_bundle_changes_nothing(
    runtime: Runtime, settings: Settings, tmp_path: Path
) -> None:
    before = runtime.services.context.settings
    client = runtime.services.webhooks
    bundle = tmp_path / "missing.pem"
    with pytest.raises(ConfigError) as refused:
        runtime.reload(changed(settings, "webhooks", ca_bundle=bundle, timeout_s=3.0))
    assert refused.value.key == "webhooks.ca_bundle"
    assert runtime.services.context.settings is before
    assert runtime.services.webhooks is client


async def test_loopback_webhooks_are_refused_by_a_reload_where_others_reach_payorch(
    db: Database, settings: Settings
) -> None:
    public = settings.model_copy(
        update={"server": settings.server.model_copy(update={"public_base_url": "https://pay.example.com"})}
    )
    async with open_runtime(public, db) as runtime:
        before = runtime.services.context.settings
        client = runtime.services.webhooks
        # The file may even name a loopback public_base_url: that one takes effect only at a restart.
        loaded = changed(changed(public, "webhooks", allow_loopback=True), "server", public_base_url="")
        with pytest.raises(ConfigError) as refused:
            runtime.reload(loaded)
        assert refused.value.key == "webhooks.allow_loopback"
        assert "server.public_base_url https://pay.example.com" in str(refused.value)
        assert runtime.services.context.settings is before
        assert runtime.services.webhooks is client


async def test_the_log_level_follows_the_reloaded_configuration(runtime: Runtime, settings: Settings) -> None:
    root = logging.getLogger()
    level = root.level
    try:
        runtime.reload(changed(settings, "logging", level="error"))
        assert root.level == logging.ERROR
        runtime.reload(changed(settings, "logging", level="debug"))
        assert root.level == logging.DEBUG
    finally:
        root.setLevel(level)


async def test_an_api_key_made_after_a_reload_is_limited_by_the_new_burst(
    client: Client, runtime: Runtime, settings: Settings, shop: Shop
) -> None:
    runtime.reload(changed(settings, "limits", requests_per_second=0.01, burst=1))
    key = await new_api_key(client, shop.merchant, shop.application_id)
    headers = {"X-API-Key": key["key"]}
    assert (await client.get(UNKNOWN_SESSION, headers=headers)).status_code == 404
    refused = await client.get(UNKNOWN_SESSION, headers=headers)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
