"""The HTTPS webhook receiver used by delivery tests: real TLS, signature checks, scripted answers."""

from __future__ import annotations

import ssl
import time
import uuid

import httpx
import pytest
import trio

from payorch.outbound.signing import (
    key_fingerprint,
    new_signing_secret,
    webhook_headers,
)
from tests import webhook_receiver as receiving
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver

# The fixture, bound by assignment (not imported by name) so that test parameters may share its name.
webhook_receiver = receiving.webhook_receiver

BODY = b'{"id":"evt_1","type":"webhook.test","createdAt":"2025-01-01T00:00:00Z","data":{}}'


def signed(secrets: list[str], body: bytes = BODY) -> dict[str, str]:
    return webhook_headers(
        secrets, f"msg_{uuid.uuid4().hex}", int(time.time()), body, key_fingerprint(secrets[0])
    )


def causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def trusting(receiver: WebhookReceiver) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=ssl.create_default_context(cafile=receiver.ca_path))


async def test_url_is_https_on_localhost_with_the_hooks_path(webhook_receiver: WebhookReceiver) -> None:
    assert webhook_receiver.url.startswith("https://localhost:")
    assert webhook_receiver.url.endswith("/hooks")
    assert webhook_receiver.ca_path.read_text().startswith("-----BEGIN CERTIFICATE-----")


async def test_signed_delivery_is_recorded_as_verified(webhook_receiver: WebhookReceiver) -> None:
    secret = new_signing_secret()
    webhook_receiver.accept_secret(secret)
    headers = signed([secret])
    sent_at = time.time()
    async with trusting(webhook_receiver) as client:
        response = await client.post(webhook_receiver.url, content=BODY, headers=headers)
    answered_at = time.time()
    assert response.status_code == 200
    [received] = await webhook_receiver.wait_for(1, timeout_s=5)
    assert received.method == "POST" and received.path == "/hooks"
    assert received.body == BODY
    assert received.headers["webhook-id"] == headers["webhook-id"]
    assert received.headers["webhook-key-fingerprint"] == key_fingerprint(secret)
    assert received.verified and received.verified_with == secret
    assert sent_at <= received.received_at <= answered_at


async def test_delivery_signed_with_another_secret_is_recorded_unverified(
    webhook_receiver: WebhookReceiver,
) -> None:
    webhook_receiver.accept_secret(new_signing_secret())
    async with trusting(webhook_receiver) as client:
        await client.post(webhook_receiver.url, content=BODY, headers=signed([new_signing_secret()]))
    [received] = await webhook_receiver.wait_for(1, timeout_s=5)
    assert not received.verified and received.verified_with is None


async def test_receiver_holding_the_old_secret_verifies_a_rotation_delivery(
    webhook_receiver: WebhookReceiver,
) -> None:
    current, previous = new_signing_secret(), new_signing_secret()
    webhook_receiver.accept_secret(previous)
    async with trusting(webhook_receiver) as client:
        await client.post(webhook_receiver.url, content=BODY, headers=signed([current, previous]))
    [received] = await webhook_receiver.wait_for(1, timeout_s=5)
    assert received.verified_with == previous


async def test_scripted_responses_are_answered_in_order_then_200(webhook_receiver: WebhookReceiver) -> None:
    webhook_receiver.script(
        [(500, {"x-attempt": "first"}, b"boom"), ScriptedResponse(503, {"retry-after": "7"}), 200]
    )
    webhook_receiver.script([410])
    async with trusting(webhook_receiver) as client:
        answers = [await client.post(webhook_receiver.url, content=BODY) for _ in range(5)]
    assert [answer.status_code for answer in answers] == [500, 503, 200, 410, 200]
    assert answers[0].headers["x-attempt"] == "first" and answers[0].content == b"boom"
    assert answers[1].headers["retry-after"] == "7"
    assert len(await webhook_receiver.wait_for(5, timeout_s=5)) == 5


async def test_any_path_is_received(webhook_receiver: WebhookReceiver) -> None:
    base = webhook_receiver.url.removesuffix("/hooks")
    async with trusting(webhook_receiver) as client:
        await client.post(f"{base}/merchant/7/events?x=1", content=BODY)
        await client.post(f"{base}/", content=BODY)
    assert [received.path for received in await webhook_receiver.wait_for(2, timeout_s=5)] == [
        "/merchant/7/events",
        "/",
    ]


async def test_scripted_delay_makes_a_client_time_out(webhook_receiver: WebhookReceiver) -> None:
    webhook_receiver.script([ScriptedResponse(200, delay_s=30)])
    async with trusting(webhook_receiver) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(webhook_receiver.url, content=BODY, timeout=0.5)
    assert len(await webhook_receiver.wait_for(1, timeout_s=5)) == 1  # recorded on arrival


async def test_wait_for_gives_up_after_its_timeout(webhook_receiver: WebhookReceiver) -> None:
    with pytest.raises(trio.TooSlowError):
        await webhook_receiver.wait_for(1, timeout_s=0.1)


async def test_client_not_trusting_the_ca_fails_tls(webhook_receiver: WebhookReceiver) -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError) as refused:
            await client.post(webhook_receiver.url, content=BODY)
    assert any(isinstance(cause, ssl.SSLCertVerificationError) for cause in causes(refused.value))
    assert webhook_receiver.requests == []
