"""No password, API key, provider key or signing secret ever reaches a log line, or a response after
the one that created it."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.logs import JsonFormatter
from payorch.storage.database import Database
from tests import webhook_receiver as receiving
from tests.helpers import PASSWORD, Client, create_session, post_json, session_body, signup_body
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver
PROVIDER_KEY = "sk_sandbox_do_not_leak_0123456789"


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    return settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})}
    )


async def test_secrets_never_reach_logs_or_later_responses(
    client: Client,
    db: Database,
    settings: Settings,
    webhook_receiver: WebhookReceiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    later_responses: list[str] = []

    async def read(path: str, headers: dict[str, str]) -> Any:
        response = await client.get(path, headers=headers)
        later_responses.append(await response.get_data(as_text=True))
        return await response.get_json()

    invite = await issue_invite(db, settings, "owner@secret.example")
    await client.post(
        f"/api/v1/merchants/signup?token={invite.token}", json=signup_body("owner@secret.example", "SEC-1")
    )
    login = await client.post(
        "/api/v1/auth/login", json={"email": "owner@secret.example", "password": PASSWORD}
    )
    jwt = {"Authorization": f"Bearer {(await login.get_json())['accessToken']}"}
    application = await (
        await client.post("/api/v1/applications", json={"name": "shop"}, headers=jwt)
    ).get_json()
    base = f"/api/v1/applications/{application['id']}"
    api_key = (await (await client.post(f"{base}/api-keys", json={}, headers=jwt)).get_json())["key"]
    await client.post(
        f"{base}/providers",
        json={"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": PROVIDER_KEY}},
        headers=jwt,
    )
    webhook = await (
        await client.post(f"{base}/webhooks", json={"url": webhook_receiver.url}, headers=jwt)
    ).get_json()
    rotated = await (await client.patch(f"{base}/webhooks/{webhook['id']}/secret", headers=jwt)).get_json()
    key = {"X-API-Key": api_key}
    created = await (
        await create_session(client, _shop(application["id"], api_key, jwt), "k", session_body())
    ).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})
    await webhook_receiver.wait_for(1, timeout_s=10)
    await post_json(
        client, f"/api/v1/sessions/{created['sessionId']}/refunds", {}, {**key, "Idempotency-Key": "r"}
    )
    await client.post(f"{base}/webhooks/{webhook['id']}/test", headers=jwt)
    # A failed login with the password in the wrong field must not log it either.
    await client.post("/api/v1/auth/login", json={"email": PASSWORD, "password": "x"})

    await read("/api/v1/applications?include=apiKeys", jwt)
    await read(f"{base}/api-keys", jwt)
    await read(f"{base}/providers", jwt)
    await read(f"{base}/webhooks", jwt)
    await read(f"{base}/webhooks/{webhook['id']}", jwt)
    await read(f"{base}/webhooks/{webhook['id']}/deliveries", jwt)
    await read(f"/api/v1/sessions/{created['sessionId']}", key)
    await read(f"{base}/sessions", key)

    secrets = {
        "password": PASSWORD,
        "invite token": invite.token,
        "API key": api_key,
        "provider key": PROVIDER_KEY,
        "signing secret": webhook["signingSecret"],
        "rotated signing secret": rotated["signingSecret"],
    }
    formatter = JsonFormatter()
    log_text = "\n".join(formatter.format(record) for record in caplog.records)
    assert len(caplog.records) > 20  # the flow above did log: the check below is not vacuous
    for name, secret in secrets.items():
        assert secret not in log_text, f"{name} reached the log"
        for body in later_responses:
            assert secret not in body, f"{name} was returned after creation"


def _shop(application_id: str, api_key: str, jwt: dict[str, str]) -> Any:
    from tests.helpers import Merchant, Shop

    return Shop(
        merchant=Merchant(email="owner@secret.example", access_token=jwt["Authorization"].split()[1]),
        application_id=application_id,
        api_key=api_key,
    )


async def test_state_changes_are_logged_with_the_request_and_application_behind_them(
    client: Client, db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from payorch.logs import ContextFilter
    from tests.helpers import new_shop

    caplog.handler.addFilter(ContextFilter())
    caplog.set_level(logging.INFO)
    shop = await new_shop(client, db, settings)
    created = await (await create_session(client, shop, "k", session_body())).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})

    def changes() -> list[logging.LogRecord]:
        return [record for record in caplog.records if record.getMessage() == "session state changed"]

    from tests.helpers import eventually

    def event_request_ids() -> set[str | None]:
        return {
            getattr(record, "requestId", None)
            for record in caplog.records
            if record.name == "payorch.access" and "/provider-events/" in getattr(record, "path", "")
        }

    async def logged() -> list[logging.LogRecord] | None:
        # The provider event's request is logged once it is answered, just after the change it made.
        found = changes()
        return found if found and getattr(found[0], "requestId", None) in event_request_ids() else None

    (change,) = await eventually(logged)
    assert getattr(change, "applicationId", None) == shop.application_id
