"""An attempt without an answer says why in words: DNS, the SSRF guard, a refused connection, TLS, a
timeout and the step it cut short; never an empty text. Against real sockets on loopback with the
webhook client payorch delivers with, and httpx's MockTransport for the steps of a timeout."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.outbound.attempt import NETWORK, REFUSED, TIMEOUT, AttemptResult, send_signed
from payorch.outbound.client import tls_context, webhook_client
from payorch.outbound.failures import failure_text
from payorch.outbound.guarded_transport import GuardedTransport
from payorch.values.clock import SYSTEM_CLOCK
from tests.webhook_receiver import WebhookReceiver, open_webhook_receiver

SECRET = "whsec_" + "A" * 32


async def attempt(
    settings: Settings, url: str, *, timeout_s: float = 5, allow_loopback: bool = False
) -> AttemptResult:
    async with webhook_client(settings) as client:
        return await send_signed(
            client,
            url=url,
            secrets=[SECRET],
            fingerprint="sha256:0",
            message_id="evt_1",
            body=b"{}",
            timeout_s=timeout_s,
            log_context={},
            clock=SYSTEM_CLOCK,
            allow_loopback=allow_loopback,
        )


async def mocked_attempt(handler: Callable[[httpx.Request], Awaitable[httpx.Response]]) -> AttemptResult:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        return await send_signed(
            client,
            url="https://hooks.example/in",
            secrets=[SECRET],
            fingerprint="sha256:0",
            message_id="evt_1",
            body=b"{}",
            timeout_s=2,
            log_context={},
            clock=SYSTEM_CLOCK,
        )


@pytest.fixture
async def self_signed_receiver() -> AsyncIterator[WebhookReceiver]:
    async with open_webhook_receiver(self_signed=True) as receiver:
        yield receiver


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 held (bound, not listening) for the test: a connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port of 127.0.0.1 that accepts connections and never says a word."""

    async def say_nothing(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port: int = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, say_nothing, listeners))
        yield port
        nursery.cancel_scope.cancel()


@pytest.fixture
async def plain_http_port() -> AsyncIterator[int]:
    """A port of 127.0.0.1 that answers any request 200 in plain HTTP, TLS or not."""

    async def answer(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port: int = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, answer, listeners))
        yield port
        nursery.cancel_scope.cancel()


async def test_a_self_signed_certificate_fails_naming_tls_and_the_verification_failure(
    settings: Settings, self_signed_receiver: WebhookReceiver
) -> None:
    result = await attempt(settings, self_signed_receiver.url)
    assert (result.status_code, result.failure_reason) == (None, NETWORK)
    assert result.error is not None
    assert result.error.startswith("TLS: certificate verify failed: self-signed certificate")
    assert "webhooks.ca_bundle" in result.error  # the setting that would make payorch trust it
    assert self_signed_receiver.requests == []


async def test_a_certificate_for_another_name_fails_naming_the_mismatch() -> None:
    async def to_loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # shop.example, as DNS might answer it

    async with open_webhook_receiver() as receiver:
        transport = GuardedTransport(
            ssl_context=tls_context(receiver.ca_path), limits=httpx.Limits(), resolve=to_loopback
        )
        async with httpx.AsyncClient(transport=transport) as client:
            result = await send_signed(
                client,
                url=receiver.url.replace("https://localhost:", "https://shop.example:"),
                secrets=[SECRET],
                fingerprint="sha256:0",
                message_id="evt_1",
                body=b"{}",
                timeout_s=5,
                log_context={},
                clock=SYSTEM_CLOCK,
            )
    assert result.error == (
        "TLS: certificate verify failed: Hostname mismatch, certificate is not valid for 'shop.example'."
    )


async def test_a_refused_connection_says_nothing_listens_there(settings: Settings, closed_port: int) -> None:
    result = await attempt(settings, f"https://127.0.0.1:{closed_port}/hooks")
    assert (result.failure_reason, result.error) == (
        NETWORK,
        f"connection refused: nothing listens on 127.0.0.1:{closed_port}",
    )


async def test_a_host_that_does_not_resolve_says_so_naming_dns(settings: Settings) -> None:
    result = await attempt(settings, "https://no-such-host.invalid/hooks")
    assert result.failure_reason == REFUSED
    assert result.error is not None
    assert result.error.startswith("DNS: no-such-host.invalid does not resolve from this server (")


async def test_no_answer_in_time_is_a_timeout_naming_the_step_it_cut_short(
    settings: Settings, silent_port: int
) -> None:
    result = await attempt(settings, f"https://127.0.0.1:{silent_port}/hooks", timeout_s=1)
    assert (result.failure_reason, result.error) == (
        TIMEOUT,
        f"timed out after 1 s in the TLS handshake with 127.0.0.1:{silent_port}",
    )


async def test_https_to_a_plain_http_endpoint_says_it_does_not_speak_tls(
    settings: Settings, plain_http_port: int
) -> None:
    result = await attempt(settings, f"https://127.0.0.1:{plain_http_port}/hooks")
    assert result.error == (
        f"TLS: 127.0.0.1:{plain_http_port} does not speak TLS (wrong version number): "
        "is it an http:// endpoint?"
    )


async def test_plain_http_to_loopback_is_delivered_with_allow_loopback_only(
    settings: Settings, plain_http_port: int
) -> None:
    url = f"http://127.0.0.1:{plain_http_port}/hooks"
    delivered = await attempt(settings, url, allow_loopback=True)
    assert (delivered.succeeded, delivered.status_code) == (True, 200)
    refused = await attempt(settings, url)
    assert refused.failure_reason == REFUSED
    assert refused.error is not None and "webhooks.allow_loopback = true" in refused.error


async def test_the_ssrf_refusal_of_a_delivery_names_the_setting_that_would_allow_it(
    settings: Settings, closed_port: int
) -> None:
    strict = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"allow_private_networks": False})}
    )
    result = await attempt(strict, f"https://localhost:{closed_port}/hooks")
    assert result.failure_reason == REFUSED
    assert result.error == (
        "refused: webhook URL host 'localhost' resolves to a non-public address (loopback): payorch "
        "posts only to public addresses; set webhooks.allow_loopback = true to allow it (local "
        "development only)"
    )


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ("connection.connect_tcp.started", "timed out after 2 s connecting to hooks.example:443"),
        ("connection.start_tls.started", "timed out after 2 s in the TLS handshake with hooks.example:443"),
        ("http11.send_request_body.started", "timed out after 2 s sending the request to hooks.example:443"),
        (
            "http11.receive_response_headers.started",
            "timed out after 2 s waiting for hooks.example:443 to answer",
        ),
    ],
)
async def test_a_timeout_names_the_step_it_cut_short(
    step: str, words: str, autojump_clock: trio.abc.Clock
) -> None:
    async def hang_at_step(request: httpx.Request) -> httpx.Response:
        await request.extensions["trace"](step, {})
        await trio.sleep(3600)
        raise AssertionError("cancelled before")

    result = await mocked_attempt(hang_at_step)
    assert (result.failure_reason, result.error) == (TIMEOUT, words)


def test_an_error_with_an_empty_message_is_described_by_its_causes() -> None:
    try:
        try:
            raise trio.BrokenResourceError
        except trio.BrokenResourceError as cause:
            raise httpx.ConnectError("") from cause
    except httpx.ConnectError as error:
        text = failure_text(error, at="hooks.example:443", timeout_s=15, stage=None)
    assert text == "ConnectError <- BrokenResourceError"


def test_an_empty_error_is_never_an_empty_text() -> None:
    assert failure_text(httpx.ReadError(""), at="", timeout_s=15, stage=None) == "ReadError"
