"""Webhook configurations: create, list, update, delete, rotate, test; secrets shown once."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.http.request_limits import TEST_SENDS_PER_MERCHANT
from payorch.storage.database import Connection, Database
from payorch.values.secretbox import SecretBox
from tests import webhook_receiver as receiving
from tests.helpers import Client, Merchant, new_api_key, new_application, new_merchant
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver, assert_signed_during_overlap

webhook_receiver = receiving.webhook_receiver

ALL_EVENTS = ["session.completed", "session.expired", "refund.completed", "refund.failed"]


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """The receiver's CA trusted, as an operator would with `webhooks.ca_bundle`."""
    return settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})}
    )


@pytest.fixture
async def application(client: Client, merchant: Merchant) -> str:
    return str((await new_application(client, merchant))["id"])


async def create(client: Client, merchant: Merchant, application: str, **body: Any) -> Any:
    return await client.post(
        f"/api/v1/applications/{application}/webhooks", json=body, headers=merchant.headers
    )


async def test_create_returns_the_signing_secret_once_and_subscribes_to_all_events_by_default(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    response = await create(client, merchant, application, url=webhook_receiver.url)
    assert response.status_code == 201
    body = await response.get_json()
    assert body["signingSecret"].startswith("whsec_")
    assert body["keyFingerprint"].startswith("sha256:") and len(body["keyFingerprint"]) == 7 + 16
    assert body["subscribedEvents"] == ALL_EVENTS
    assert (body["isActive"], body["lastTestAt"], body["lastTestStatus"], body["updatedAt"]) == (
        True,
        None,
        None,
        None,
    )
    listed = await client.get(f"/api/v1/applications/{application}/webhooks", headers=merchant.headers)
    (item,) = (await listed.get_json())["items"]
    assert "signingSecret" not in item
    assert body["signingSecret"] not in await listed.get_data(as_text=True)
    read = await client.get(
        f"/api/v1/applications/{application}/webhooks/{body['id']}", headers=merchant.headers
    )
    assert "signingSecret" not in await read.get_json()


async def test_signing_secret_is_stored_encrypted(
    client: Client,
    merchant: Merchant,
    application: str,
    db: Database,
    settings: Settings,
    webhook_receiver: WebhookReceiver,
) -> None:
    body = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()

    async def stored(conn: Connection) -> bytes:
        return bytes(await conn.fetchval("SELECT secret FROM webhook_configs"))

    sealed = await db.autocommit(stored)
    assert body["signingSecret"].encode() not in sealed
    assert SecretBox(settings.security.encryption_key).open(sealed) == body["signingSecret"]


async def test_subscribed_events_can_be_chosen(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    response = await create(
        client,
        merchant,
        application,
        url=webhook_receiver.url,
        subscribedEvents=["session.completed", "refund.failed"],
    )
    assert (await response.get_json())["subscribedEvents"] == ["session.completed", "refund.failed"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "http://example.com/hooks"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "https://user:pass@example.com/hooks"}, "url"),
        ({"url": "https://example.com/hooks", "subscribedEvents": ["session.created"]}, "subscribedEvents"),
        ({"url": "https://example.com/hooks", "subscribedEvents": []}, "subscribedEvents"),
        ({}, "url"),
    ],
)
async def test_invalid_configuration_is_400(
    client: Client, merchant: Merchant, application: str, db: Database, body: dict[str, Any], field: str
) -> None:
    response = await create(client, merchant, application, **body)
    assert response.status_code == 400
    assert (await response.get_json())["details"][0]["field"] == field

    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM webhook_configs"))

    assert await db.autocommit(count) == 0


async def test_private_address_is_refused_unless_allowed(
    client: Client, merchant: Merchant, application: str, db: Database, settings: Settings
) -> None:
    from payorch.runtime import open_runtime

    strict = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"allow_private_networks": False})}
    )
    async with open_runtime(strict, db) as runtime:
        strict_client = runtime.app.test_client()
        for url in ("https://127.0.0.1/hooks", "https://10.1.2.3/hooks", "https://169.254.169.254/latest"):
            response = await create(strict_client, merchant, application, url=url)
            assert response.status_code == 400, url
    allowed = await create(client, merchant, application, url="https://127.0.0.1/hooks")
    assert allowed.status_code == 201


async def test_update_url_active_flag_and_events(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    response = await client.patch(
        path,
        json={"url": webhook_receiver.url + "/v2", "isActive": False, "subscribedEvents": ["refund.failed"]},
        headers=merchant.headers,
    )
    assert response.status_code == 200
    body = await response.get_json()
    assert (body["url"], body["isActive"], body["subscribedEvents"]) == (
        webhook_receiver.url + "/v2",
        False,
        ["refund.failed"],
    )
    assert body["updatedAt"] is not None
    assert "signingSecret" not in body
    refused = await client.patch(path, json={"url": "http://plain.example"}, headers=merchant.headers)
    assert refused.status_code == 400


async def test_deleted_configuration_is_gone_from_lists_and_404(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    deleted = await client.delete(path, headers=merchant.headers)
    assert (deleted.status_code, await deleted.get_json()) == (200, {})
    listed = await client.get(f"/api/v1/applications/{application}/webhooks", headers=merchant.headers)
    assert (await listed.get_json())["items"] == []
    assert (await client.get(path, headers=merchant.headers)).status_code == 404
    assert (await client.patch(path, json={"isActive": True}, headers=merchant.headers)).status_code == 404
    assert (await client.delete(path, headers=merchant.headers)).status_code == 404


async def test_rotation_gives_a_new_secret_and_fingerprint(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    response = await client.patch(
        f"/api/v1/applications/{application}/webhooks/{created['id']}/secret", headers=merchant.headers
    )
    assert response.status_code == 200
    rotated = await response.get_json()
    assert set(rotated) == {"keyFingerprint", "signingSecret"}
    assert rotated["signingSecret"] != created["signingSecret"]
    assert rotated["keyFingerprint"] != created["keyFingerprint"]


async def test_test_endpoint_sends_a_signed_webhook_test_and_records_the_result(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    webhook_receiver.accept_secret(created["signingSecret"])
    webhook_receiver.script([(200, {}, ("thanks" * 800).encode())])
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    response = await client.post(f"{path}/test", headers=merchant.headers)
    assert response.status_code == 200
    result = await response.get_json()
    assert (result["success"], result["httpStatusCode"]) == (True, 200)
    assert result["responseBody"] == ("thanks" * 800)[:4096]
    assert result["latencyMs"] >= 0 and result["deliveredAt"].endswith("Z")
    (request,) = webhook_receiver.requests
    assert request.verified
    assert request.json()["type"] == "webhook.test"
    assert request.headers["webhook-key-fingerprint"] == created["keyFingerprint"]
    read = await (await client.get(path, headers=merchant.headers)).get_json()
    assert (read["lastTestStatus"], read["lastTestAt"]) == ("SUCCEEDED", result["deliveredAt"])


async def test_test_endpoint_reports_a_failing_endpoint(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    webhook_receiver.script([(500, {}, b"boom")])
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    result = await (await client.post(f"{path}/test", headers=merchant.headers)).get_json()
    assert (result["success"], result["httpStatusCode"], result["responseBody"]) == (False, 500, "boom")
    assert result["error"] is None  # it answered: the status says why
    assert (await (await client.get(path, headers=merchant.headers)).get_json())["lastTestStatus"] == "FAILED"


async def test_test_endpoint_reports_a_network_failure_with_null_status_and_body_and_why(
    client: Client, merchant: Merchant, application: str
) -> None:
    created = await (await create(client, merchant, application, url="https://127.0.0.1:9/hooks")).get_json()
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    result = await (await client.post(f"{path}/test", headers=merchant.headers)).get_json()
    assert (result["success"], result["httpStatusCode"], result["responseBody"]) == (False, None, None)
    assert result["error"] == "connection refused: nothing listens on 127.0.0.1:9"


async def test_test_endpoint_signs_with_both_secrets_during_a_rotation_overlap(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    rotated = await (await client.patch(f"{path}/secret", headers=merchant.headers)).get_json()
    result = await (await client.post(f"{path}/test", headers=merchant.headers)).get_json()
    assert result["success"] is True
    (request,) = webhook_receiver.requests
    assert_signed_during_overlap(
        request, created["signingSecret"], rotated["signingSecret"], rotated["keyFingerprint"]
    )


async def test_test_endpoint_reads_only_the_excerpt_of_a_huge_answer(
    client: Client, merchant: Merchant, application: str, webhook_receiver: WebhookReceiver
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    huge = 50 * 1024 * 1024
    webhook_receiver.script([ScriptedResponse(200, {}, b"start:", streamed_body_bytes=huge)])
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    result = await (await client.post(f"{path}/test", headers=merchant.headers)).get_json()
    assert (result["success"], result["httpStatusCode"]) == (True, 200)
    assert result["responseBody"] == ("start:" + "x" * 4096)[:4096]
    assert webhook_receiver.streamed_bytes < huge // 2  # payorch hung up after the excerpt


@pytest.mark.parametrize(
    ("body", "shown"),
    [(b"ok\x00bye", "ok\ufffdbye"), (b"\xff bad \xed\xa0\x80", "\ufffd bad \ufffd\ufffd\ufffd")],
    ids=["nul_byte", "invalid_utf8"],
)
async def test_test_endpoint_shows_any_answer_as_valid_text(
    client: Client,
    merchant: Merchant,
    application: str,
    webhook_receiver: WebhookReceiver,
    body: bytes,
    shown: str,
) -> None:
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    webhook_receiver.script([(500, {"Retry-After": "²"}, body)])
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}"
    response = await client.post(f"{path}/test", headers=merchant.headers)
    assert response.status_code == 200
    result = await response.get_json()
    assert (result["success"], result["httpStatusCode"], result["responseBody"]) == (False, 500, shown)


async def test_webhooks_need_the_jwt_of_the_owner(
    client: Client,
    merchant: Merchant,
    application: str,
    db: Database,
    settings: Settings,
    webhook_receiver: WebhookReceiver,
) -> None:
    key = await new_api_key(client, merchant, application)
    path = f"/api/v1/applications/{application}/webhooks"
    assert (await client.get(path, headers={"X-API-Key": key["key"]})).status_code == 401
    stranger = await new_merchant(client, db, settings)
    assert (await client.get(path, headers=stranger.headers)).status_code == 403
    created = await (await create(client, merchant, application, url=webhook_receiver.url)).get_json()
    assert (await client.delete(f"{path}/{created['id']}", headers=stranger.headers)).status_code == 403
    assert (await client.get(f"{path}/{uuid.uuid4()}", headers=merchant.headers)).status_code == 404


async def test_a_merchant_gets_at_most_its_share_of_test_sends_while_others_test_freely(
    client: Client, db: Database, settings: Settings, merchant: Merchant, webhook_receiver: WebhookReceiver
) -> None:
    application = str((await new_application(client, merchant))["id"])
    created = await (
        await create(client, merchant, application, url=webhook_receiver.url + "/slow")
    ).get_json()
    released = trio.Event()
    webhook_receiver.script(
        [ScriptedResponse(200, hold=released)] * TEST_SENDS_PER_MERCHANT, path="/hooks/slow"
    )
    path = f"/api/v1/applications/{application}/webhooks/{created['id']}/test"
    answers: list[Any] = []

    async with trio.open_nursery() as nursery:
        for _ in range(TEST_SENDS_PER_MERCHANT):
            nursery.start_soon(lambda: _collect(answers, client.post(path, headers=merchant.headers)))
        await webhook_receiver.wait_for(TEST_SENDS_PER_MERCHANT, timeout_s=10, path="/hooks/slow")

        # One more of this merchant's test sends is 429 while its endpoint hangs ...
        refused = await client.post(path, headers=merchant.headers)
        assert refused.status_code == 429
        assert (await refused.get_json())["retryAfter"] >= 1
        # ... and another merchant's test send goes out and comes back all the same.
        other = await new_merchant(client, db, settings)
        other_application = str((await new_application(client, other))["id"])
        other_created = await (
            await create(client, other, other_application, url=webhook_receiver.url + "/quick")
        ).get_json()
        other_path = f"/api/v1/applications/{other_application}/webhooks/{other_created['id']}/test"
        assert (await (await client.post(other_path, headers=other.headers)).get_json())["success"] is True
        released.set()

    assert [response.status_code for response in answers] == [200] * TEST_SENDS_PER_MERCHANT
    # Once they ended, the merchant may test again.
    assert (await client.post(path, headers=merchant.headers)).status_code == 200


async def _collect(answers: list[Any], request: Awaitable[Any]) -> None:
    answers.append(await request)
