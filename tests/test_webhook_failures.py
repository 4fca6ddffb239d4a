"""Why a webhook failed reaches whoever must act on it, in words: the merchant in the test endpoint's
answer, the delivery log and the 400 of a refused URL (naming the setting that would allow it), the
operator in the service log, one line per failed attempt (never the signing secret nor the body)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from payorch.config import Settings
from payorch.logs import JsonFormatter
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.helpers import Client, Merchant, Shop, eventually, new_application, new_shop
from tests.test_webhook_delivery import delivery_in, pay
from tests.webhook_receiver import WebhookReceiver, open_webhook_receiver

SELF_SIGNED = "TLS: certificate verify failed: self-signed certificate"


@pytest.fixture
async def self_signed_receiver() -> AsyncIterator[WebhookReceiver]:
    """A receiver whose certificate no CA vouches for: payorch must refuse it."""
    async with open_webhook_receiver(self_signed=True) as receiver:
        yield receiver


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A short retry schedule: a failed delivery is FAILED after its second attempt."""
    webhooks = settings.webhooks.model_copy(update={"retry_schedule_s": [0, 0.2], "timeout_s": 5})
    return settings.model_copy(update={"webhooks": webhooks})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def subscribe(client: Client, shop: Shop, url: str) -> dict[str, Any]:
    response = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks",
        json={"url": url},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    config: dict[str, Any] = await response.get_json()
    return config


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    """The records logged with `message`, as the JSON lines payorch writes."""
    formatter = JsonFormatter()
    return [
        json.loads(formatter.format(record)) for record in caplog.records if record.getMessage() == message
    ]


async def test_a_self_signed_receiver_fails_naming_tls_in_the_test_answer_the_log_and_the_delivery_log(
    client: Client, shop: Shop, self_signed_receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = await subscribe(client, shop, self_signed_receiver.url)
    path = f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}"

    tested = await (await client.post(f"{path}/test", headers=shop.merchant.headers)).get_json()
    assert (tested["success"], tested["httpStatusCode"], tested["responseBody"]) == (False, None, None)
    assert tested["error"].startswith(SELF_SIGNED)
    (test_line,) = logged(caplog, "webhook test event sent")
    assert test_line["error"] == tested["error"] and test_line["webhookId"] == config["id"]

    await pay(client, shop)
    delivery = await eventually(lambda: delivery_in(client, shop, config, "FAILED"))
    assert delivery["lastError"].startswith(SELF_SIGNED)
    assert [attempt["error"][: len(SELF_SIGNED)] for attempt in delivery["attemptLog"]] == [SELF_SIGNED] * 2
    attempts = logged(caplog, "webhook delivery attempt")
    assert [line["error"][: len(SELF_SIGNED)] for line in attempts] == [SELF_SIGNED] * 2
    assert {line["deliveryId"] for line in attempts} == {delivery["id"]}
    assert self_signed_receiver.requests == []
    # The operator's lines hold why, never the secret nor the body.
    for line in [test_line, *attempts]:
        assert config["signingSecret"] not in json.dumps(line)
        assert "orderReference" not in json.dumps(line)


@pytest.mark.parametrize(
    ("url", "setting"),
    [
        ("https://127.0.0.1:8787/webhooks", "webhooks.allow_loopback"),
        ("https://localhost:8787/webhooks", "webhooks.allow_loopback"),
        ("http://127.0.0.1:8787/webhooks", "webhooks.allow_loopback"),
        ("https://10.0.0.5/webhooks", "webhooks.allow_private_networks"),
    ],
)
async def test_a_refused_url_names_the_setting_that_would_allow_it(
    db: Database, settings: Settings, client: Client, merchant: Merchant, url: str, setting: str
) -> None:
    application = (await new_application(client, merchant))["id"]
    strict = settings.webhooks.model_copy(update={"allow_private_networks": False})
    async with open_runtime(settings.model_copy(update={"webhooks": strict}), db) as runtime:
        response = await runtime.app.test_client().post(
            f"/api/v1/applications/{application}/webhooks", json={"url": url}, headers=merchant.headers
        )
    assert response.status_code == 400
    (problem,) = (await response.get_json())["details"]
    assert problem["field"] == "url"
    assert f"set {setting} = true to allow it" in problem["message"]


async def test_a_host_that_does_not_resolve_is_refused_saying_so(client: Client, merchant: Merchant) -> None:
    application = (await new_application(client, merchant))["id"]
    response = await client.post(
        f"/api/v1/applications/{application}/webhooks",
        json={"url": "https://shop.invalid/payorch-webhooks"},
        headers=merchant.headers,
    )
    assert response.status_code == 400
    (problem,) = (await response.get_json())["details"]
    assert problem["message"].startswith(
        "webhook URL host 'shop.invalid' does not resolve from this server ("
    )
