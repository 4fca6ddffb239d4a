"""The webhook client connects only to addresses the SSRF guard allowed, the very ones it checked:
against the real HTTPS receiver on loopback, with the guard strict and with a resolver that
stands in for DNS."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import httpx
import pytest

from payorch.config import Settings
from payorch.outbound.attempt import REFUSED, send_signed
from payorch.outbound.client import webhook_client
from payorch.outbound.guarded_transport import GuardedTransport
from payorch.outbound.ssrf import UnsafeWebhookUrl
from payorch.values.clock import SYSTEM_CLOCK
from tests import webhook_receiver as receiving
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver
BODY = b'{"type": "session.completed"}'


def _with_receivers_ca(settings: Settings, receiver: WebhookReceiver, *, allow_private: bool) -> Settings:
    webhooks = settings.webhooks.model_copy(
        update={"ca_bundle": receiver.ca_path, "allow_private_networks": allow_private}
    )
    return settings.model_copy(update={"webhooks": webhooks})


async def test_a_strict_client_refuses_a_host_resolving_to_loopback_before_connecting(
    settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    strict = _with_receivers_ca(settings, webhook_receiver, allow_private=False)
    async with webhook_client(strict) as client:
        with pytest.raises(UnsafeWebhookUrl, match="non-public address"):
            await client.post(webhook_receiver.url, content=BODY)
        result = await send_signed(
            client,
            url=webhook_receiver.url,
            secrets=["whsec_" + "A" * 32],
            fingerprint="fp",
            message_id="msg_1",
            body=BODY,
            timeout_s=strict.webhooks.timeout_s,
            log_context={},
            clock=SYSTEM_CLOCK,
        )
    assert (result.status_code, result.failure_reason) == (None, REFUSED)
    assert result.error is not None and result.error.startswith("refused: ")
    assert webhook_receiver.requests == []


async def test_the_connection_goes_to_the_address_the_guard_returned_and_tls_checks_the_name(
    webhook_receiver: WebhookReceiver,
) -> None:
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["127.0.0.2", "127.0.0.1"]  # nothing listens on the first: the next is tried

    port = urlsplit(webhook_receiver.url).port
    assert port is not None
    transport = GuardedTransport(
        ssl_context=ssl.create_default_context(cafile=webhook_receiver.ca_path),
        limits=httpx.Limits(max_connections=4),
        resolve=resolve,
    )
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(2):
            assert (await client.post(webhook_receiver.url, content=BODY)).status_code == 200
    assert asked == [("localhost", port)]  # once per connection, and the connection was kept
    assert len(webhook_receiver.requests) == 2


async def test_a_host_whose_certificate_does_not_match_fails_tls_wherever_it_resolves(
    webhook_receiver: WebhookReceiver,
) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    transport = GuardedTransport(
        ssl_context=ssl.create_default_context(cafile=webhook_receiver.ca_path),
        limits=httpx.Limits(max_connections=4),
        resolve=resolve,
    )
    impostor = webhook_receiver.url.replace("https://localhost:", "https://shop.example:")
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(impostor, content=BODY)
    assert webhook_receiver.requests == []


async def test_a_proxy_in_the_environment_is_not_used_for_deliveries(
    settings: Settings, webhook_receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    allowed = _with_receivers_ca(settings, webhook_receiver, allow_private=True)
    async with webhook_client(allowed) as client:
        assert (await client.post(webhook_receiver.url, content=BODY)).status_code == 200
