"""One attempt reports whatever the receiver does as a result, never as an exception; it reads at
most the excerpt's size of a body. Receivers are played by httpx's MockTransport here; the real
HTTPS receiver plays them in tests/test_webhook_isolation.py."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
import trio

from payorch.outbound import attempt
from payorch.outbound.attempt import (
    HTTP_STATUS,
    INTERNAL,
    NETWORK,
    RESPONSE_EXCERPT,
    TIMEOUT,
    AttemptResult,
    send_signed,
)
from payorch.values.clock import SYSTEM_CLOCK

SECRET = "whsec_" + "A" * 32
URL = "https://hooks.example/in"


class EndlessBody(httpx.AsyncByteStream):
    """A body that never ends, counting what was pulled from it and whether it was closed."""

    def __init__(self) -> None:
        self.pulled = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            self.pulled += 65536
            yield b"y" * 65536

    async def aclose(self) -> None:
        self.closed = True


class BrokenBody(httpx.AsyncByteStream):
    """Some bytes, then the connection breaks."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"partial"
        raise httpx.ReadError("connection reset")


async def send(handler: Callable[[httpx.Request], object], timeout_s: float = 5) -> AttemptResult:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:  # type: ignore[arg-type]
        return await send_signed(
            client,
            url=URL,
            secrets=[SECRET],
            fingerprint="sha256:0",
            message_id="evt_1",
            body=b"{}",
            timeout_s=timeout_s,
            log_context={"deliveryId": "d-1"},
            clock=SYSTEM_CLOCK,
        )


async def test_an_endless_body_is_read_only_as_far_as_the_excerpt_and_then_closed() -> None:
    body = EndlessBody()
    result = await send(lambda request: httpx.Response(200, stream=body))
    assert result.succeeded and result.response_excerpt == "y" * RESPONSE_EXCERPT
    assert body.pulled == 65536  # one chunk: nothing after the excerpt was asked for
    assert body.closed


async def test_a_body_that_breaks_off_after_the_status_keeps_the_status() -> None:
    result = await send(lambda request: httpx.Response(500, stream=BrokenBody()))
    assert (result.status_code, result.response_excerpt, result.failure_reason) == (
        500,
        "partial",
        HTTP_STATUS,
    )


@pytest.mark.parametrize("status", [0, 42, 1000, 99999])
async def test_a_status_http_does_not_have_is_no_answer(status: int) -> None:
    result = await send(lambda request: httpx.Response(status))
    assert (result.status_code, result.failure_reason) == (None, NETWORK)
    assert result.error is not None and "invalid HTTP status code" in result.error


@pytest.mark.parametrize(("status", "honoured"), [(429, 7.0), (503, 7.0), (500, None), (200, None)])
async def test_retry_after_is_read_on_429_and_503_only(status: int, honoured: float | None) -> None:
    result = await send(lambda request: httpx.Response(status, headers={"Retry-After": "7"}))
    assert result.retry_after_s == honoured


async def test_a_receiver_answering_after_the_timeout_is_a_timeout(autojump_clock: trio.abc.Clock) -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await trio.sleep(3600)
        return httpx.Response(200)

    result = await send(hang, timeout_s=2)
    assert (result.status_code, result.failure_reason, result.error) == (None, TIMEOUT, "timed out after 2 s")
    assert result.latency_ms == 2000


async def test_a_network_error_quoting_the_receiver_is_stored_as_valid_text() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("illegal header \x00 \ud800")

    result = await send(refuse)
    assert result.failure_reason == NETWORK
    assert result.error == "RemoteProtocolError: illegal header \ufffd \ufffd"


async def test_an_error_inside_payorch_fails_the_attempt_and_is_logged_with_its_context(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_signing(*args: object) -> dict[str, str]:
        raise KeyError("a bug")

    monkeypatch.setattr(attempt, "webhook_headers", broken_signing)
    with caplog.at_level(logging.ERROR, logger="payorch.outbound"):
        result = await send(lambda request: httpx.Response(200))
    assert (result.status_code, result.failure_reason, result.error) == (
        None,
        INTERNAL,
        "internal error: KeyError",
    )
    (record,) = caplog.records
    assert record.__dict__["deliveryId"] == "d-1" and record.exc_info is not None
