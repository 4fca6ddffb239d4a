"""The HTTP server (payorch/http/server.py) over raw sockets: HTTP/1.1 only, connections bounded
per node and per address, a request's head and body read within `server.read_timeout_s`, and a
client that closes its connection cancels its request (a held login's hold too).

The service runs in-process (run() on port 0, its own database: the `settings` fixture only).
A second client address is 127.0.0.2, which Linux routes over loopback like 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from functools import partial
from typing import cast
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config as HypercornConfig
from quart_trio import QuartTrio

from payorch.config import LimitSettings, ServerSettings, Settings
from payorch.http import server as http_server
from payorch.service import RunningService, run
from tests.helpers import eventually

OTHER_ADDRESS = "127.0.0.2"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: payorch.test\r\n\r\n"
# HTTP/2's connection preface (RFC 9113, 3.4) followed by an empty SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2C_UPGRADE = (
    b"GET /healthz HTTP/1.1\r\nHost: payorch.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
)
SLOW_LOGIN_HEAD = (
    b"POST /api/v1/auth/login HTTP/1.1\r\nHost: payorch.test\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n\r\n"
)


def _with_server(settings: Settings, **changes: object) -> Settings:
    server = ServerSettings.model_validate({**settings.server.model_dump(), **changes})
    return settings.model_copy(update={"server": server})


@asynccontextmanager
async def _running(settings: Settings) -> AsyncIterator[tuple[str, int]]:
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        service: RunningService = await nursery.start(partial(run, settings, shutdown=shutdown))
        url = urlsplit(service.addresses[0])
        assert url.hostname is not None and url.port is not None
        yield url.hostname, url.port
        shutdown.set()


async def _connect(address: tuple[str, int], source: str = "127.0.0.1") -> trio.SocketStream:
    return await trio.open_tcp_stream(*address, local_address=source)


async def _response(stream: trio.SocketStream) -> bytes:
    """One response: its head, and as many bytes of body as its Content-Length says."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = await stream.receive_some()
        if not chunk:
            return received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    while length and len(body) < int(length.group(1)):
        chunk = await stream.receive_some()
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _body(response: bytes) -> object:
    return json.loads(response.partition(b"\r\n\r\n")[2])


async def _trickling_until_closed(stream: trio.SocketStream, trickle: bytes) -> bytes:
    """Send `trickle` every 0.2 s, keeping every byte that arrives, until the server closes the
    connection; what arrived."""
    received = bytearray()
    with suppress(trio.BrokenResourceError):
        while True:
            with trio.move_on_after(0.2):
                while chunk := await stream.receive_some():
                    received += chunk
                return bytes(received)
            await stream.send_all(trickle)
    return bytes(received)


async def _until_closed(stream: trio.SocketStream) -> bytes:
    """What arrives until the server closes the connection (or resets it: closed with bytes of
    ours unread)."""
    received = b""
    with suppress(trio.BrokenResourceError):
        while chunk := await stream.receive_some():
            received += chunk
    return received


async def _served(address: tuple[str, int], source: str = "127.0.0.1") -> bytes:
    stream = await _connect(address, source)
    async with stream:
        await stream.send_all(HEALTHZ)
        return await _response(stream)


# --- HTTP/1.1 only ------------------------------------------------------------------------------


async def test_an_http2_prior_knowledge_preface_is_answered_505_in_http11_and_closed(
    settings: Settings,
) -> None:
    async with _running(settings) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(HTTP2_PREFACE)
            with trio.fail_after(5):
                answer = await _until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 505 "), answer[:40]
    assert b'"code":505' in answer


async def test_an_h2c_upgrade_is_ignored_and_the_request_answered_in_http11(settings: Settings) -> None:
    async with _running(settings) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(H2C_UPGRADE)
            with trio.fail_after(5):
                answer = await _response(stream)
            # Still HTTP/1.1 on the same connection.
            await stream.send_all(HEALTHZ)
            with trio.fail_after(5):
                again = await _response(stream)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:40]
    assert _body(answer) == {"status": "ok"}
    assert again.startswith(b"HTTP/1.1 200 ")


async def test_a_request_with_content_length_and_transfer_encoding_is_400_and_its_connection_closed(
    settings: Settings,
) -> None:
    # Read as chunked, the first request ends at `0\r\n\r\n` and the second would be served next; a
    # proxy trusting Content-Length would have read the second as the first one's body.
    both = (
        b"POST /healthz HTTP/1.1\r\nHost: payorch.test\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    async with _running(settings) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(both + HEALTHZ)
            with trio.fail_after(5):
                answer = await _until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:40]
    assert answer.count(b"HTTP/1.1 ") == 1, answer
    assert _body(answer) == {
        "error": "Bad Request",
        "message": "a request may not carry both Content-Length and Transfer-Encoding",
        "code": 400,
    }


# --- Connections per address and per node -------------------------------------------------------


async def test_a_connection_over_the_per_address_cap_is_refused_while_another_address_is_served(
    settings: Settings,
) -> None:
    small = _with_server(settings, max_connections_per_address=3, keep_alive_timeout_s=30)
    async with _running(small) as address, AsyncExitStack() as held:
        for _ in range(3):  # each answered once, then kept open and idle
            stream = await held.enter_async_context(await _connect(address))
            await stream.send_all(HEALTHZ)
            assert (await _response(stream)).startswith(b"HTTP/1.1 200 ")
        refused = await _connect(address)
        async with refused:
            with trio.fail_after(5):
                answer = await _until_closed(refused)
        with trio.fail_after(5):
            assert (await _served(address, OTHER_ADDRESS)).startswith(b"HTTP/1.1 200 ")
            metrics = await _connect(address, OTHER_ADDRESS)
            async with metrics:
                await metrics.send_all(b"GET /metrics HTTP/1.1\r\nHost: payorch.test\r\n\r\n")
                exposition = await _response(metrics)
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:40]
    assert b"\r\nretry-after: 1\r\n" in answer
    assert answer.endswith(b'"code":503,"retryAfter":1}')
    assert b'payorch_http_connections_refused_total{limit="address"} 1.0' in exposition


async def test_a_connection_over_the_node_cap_is_refused_until_one_closes(settings: Settings) -> None:
    small = _with_server(settings, max_connections=2, max_connections_per_address=2, keep_alive_timeout_s=30)
    async with _running(small) as address:
        first = await _connect(address)
        async with first, await _connect(address) as second:
            for stream in (first, second):
                await stream.send_all(HEALTHZ)
                assert (await _response(stream)).startswith(b"HTTP/1.1 200 ")
            other = await _connect(address, OTHER_ADDRESS)
            async with other:
                with trio.fail_after(5):
                    assert (await _until_closed(other)).startswith(b"HTTP/1.1 503 ")
            await first.aclose()

            async def served() -> bytes | None:
                answer = await _served(address, OTHER_ADDRESS)
                return answer if answer.startswith(b"HTTP/1.1 200 ") else None

            # Once the server has seen `first` close: it says so to no one.
            answer = await eventually(served, 5)
    assert _body(answer) == {"status": "ok"}


def test_the_per_address_cap_is_at_most_the_node_cap() -> None:
    try:
        ServerSettings(max_connections=10, max_connections_per_address=11)
    except ValueError as error:
        assert "server.max_connections" in str(error)
    else:
        raise AssertionError("accepted a per-address cap above the node's")


# --- Slow requests ------------------------------------------------------------------------------


async def test_a_body_slower_than_the_read_timeout_is_answered_408_and_its_connection_closed(
    settings: Settings,
) -> None:
    small = _with_server(settings, read_timeout_s=1, keep_alive_timeout_s=30)
    async with _running(small) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(SLOW_LOGIN_HEAD + b'{"email"')
            with trio.fail_after(5):
                answer = await _trickling_until_closed(stream, b" ")  # never idle, never done
        # The server still serves others.
        assert (await _served(address)).startswith(b"HTTP/1.1 200 ")
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:40]
    assert answer.endswith(b'"code":408}')


async def test_a_head_slower_than_the_read_timeout_is_closed(settings: Settings) -> None:
    small = _with_server(settings, read_timeout_s=1, keep_alive_timeout_s=30)
    async with _running(small) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(b"GET /healthz HTTP/1.1\r\n")
            with trio.fail_after(5):
                answer = await _trickling_until_closed(stream, b"X-Slow: 1\r\n")
    assert answer == b""


async def test_a_body_that_arrives_within_the_read_timeout_is_served(settings: Settings) -> None:
    small = _with_server(settings, read_timeout_s=2, keep_alive_timeout_s=30)
    body = b'{"email": "nobody@example.com", "password": "not-the-password"}'
    head = SLOW_LOGIN_HEAD.replace(b"Content-Length: 100", b"Content-Length: %d" % len(body))
    async with _running(small) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(head)
            for start in range(0, len(body), 16):  # in pieces over about a second
                await trio.sleep(0.25)
                await stream.send_all(body[start : start + 16])
            with trio.fail_after(5):
                answer = await _response(stream)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:40]


# --- A client that goes away --------------------------------------------------------------------


@asynccontextmanager
async def _serving(
    app: object, keep_alive_timeout_s: float = 5, shutdown: trio.Event | None = None
) -> AsyncIterator[tuple[str, int]]:
    """`app` (a plain ASGI callable) served by payorch's HTTP server on loopback, until the block
    ends or `shutdown` is set."""
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = logging.getLogger("tests.http_server")
    limits = http_server.ConnectionLimits(
        max_connections=10,
        max_connections_per_address=10,
        read_timeout_s=5,
        keep_alive_timeout_s=keep_alive_timeout_s,
    )
    shutdown = trio.Event() if shutdown is None else shutdown
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(http_server.serve, app, config, limits, shutdown_trigger=shutdown.wait)
        )
        url = urlsplit(binds[0])
        assert url.hostname is not None and url.port is not None
        yield url.hostname, url.port
        shutdown.set()


async def test_a_client_closing_its_connection_cancels_its_request() -> None:
    app = QuartTrio("slow")
    began, cancelled = trio.Event(), trio.Event()

    @app.route("/slow")
    async def slow() -> str:
        began.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    async with _serving(app) as address:
        stream = await _connect(address)
        await stream.send_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await began.wait()
        await stream.aclose()
        with trio.fail_after(2):
            await cancelled.wait()


def _login(email: str) -> bytes:
    body = json.dumps({"email": email, "password": "not-the-password-1"}).encode()
    head = (
        f"POST /api/v1/auth/login HTTP/1.1\r\nHost: payorch.test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def test_a_client_closing_its_connection_while_its_login_is_held_ends_the_hold(
    settings: Settings,
) -> None:
    # One refusal held in all, for a minute: while one is held, another group's is answered at once.
    limits = LimitSettings(
        login_per_minute=1,
        login_refusal_hold_s=60.0,
        login_refusals_held_per_address=1,
        login_refusals_held=1,
    )
    async with _running(settings.model_copy(update={"limits": limits})) as address:
        for source in ("127.0.0.1", OTHER_ADDRESS):  # each group's one token
            stream = await _connect(address, source)
            async with stream:
                await stream.send_all(_login(f"nobody@{source}.example"))
                assert b" 401 " in (await _response(stream)).split(b"\r\n")[0]
        held = await _connect(address)
        await held.send_all(_login("nobody@held.example"))
        with trio.move_on_after(0.5) as waited:
            await held.receive_some()
        assert waited.cancelled_caught  # held
        await held.aclose()

        async def other_refusal_is_held() -> bool:
            stream = await _connect(address, OTHER_ADDRESS)
            async with stream:
                await stream.send_all(_login("nobody@other.example"))
                with trio.move_on_after(0.5) as waiting:
                    await stream.receive_some()
            return waiting.cancelled_caught

        # The closed connection's hold has ended: the process's one place is free again.
        await eventually(other_refusal_is_held)


# --- an answer's writes -------------------------------------------------------------------------


Say = Callable[[dict[str, object]], Awaitable[None]]


async def _lifespan(scope: dict[str, object], receive: object, send: object) -> bool:
    """Answer a lifespan's startup and shutdown; whether `scope` was one."""
    if scope["type"] != "lifespan":
        return False
    hear, say = cast(Callable[[], Awaitable[dict[str, object]]], receive), cast(Say, send)
    while (await hear())["type"] != "lifespan.shutdown":
        await say({"type": "lifespan.startup.complete"})
    await say({"type": "lifespan.shutdown.complete"})
    return True


async def _in_pieces(scope: dict[str, object], receive: object, send: object) -> None:
    """An answer whose body comes in three pieces, the last empty."""
    if await _lifespan(scope, receive, send):
        return
    say = cast(Say, send)
    await say({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"6")]})
    await say({"type": "http.response.body", "body": b"abc", "more_body": True})
    await trio.sleep(0.05)
    await say({"type": "http.response.body", "body": b"def", "more_body": True})
    await say({"type": "http.response.body", "body": b"", "more_body": False})


async def _head_alone(scope: dict[str, object], receive: object, send: object) -> None:
    """An answer that ends after its head: the app returns without a body."""
    if await _lifespan(scope, receive, send):
        return
    say = cast(Say, send)
    await say({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})


async def test_an_answer_whose_body_comes_in_pieces_arrives_whole_and_the_connection_serves_again() -> None:
    async with _serving(_in_pieces) as address:
        stream = await _connect(address)
        async with stream:
            for _ in range(2):  # kept alive: the second request on the same connection
                await stream.send_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                with trio.fail_after(5):
                    response = await _response(stream)
                assert response.startswith(b"HTTP/1.1 200")
                assert response.endswith(b"\r\n\r\nabcdef")


async def test_an_answer_that_ends_after_its_head_still_sends_its_head_then_closes() -> None:
    async with _serving(_head_alone) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            with trio.fail_after(5):
                received = await _until_closed(stream)
    assert received.startswith(b"HTTP/1.1 200")
    assert received.endswith(b"\r\n\r\n")


# --- keep-alive ---------------------------------------------------------------------------------


async def _answered_after(scope: dict[str, object], receive: object, send: object) -> None:
    """An answer after as many seconds as the request's path says (`/0.5`)."""
    if await _lifespan(scope, receive, send):
        return
    await trio.sleep(float(str(scope["path"]).strip("/")))
    say = cast(Say, send)
    await say({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await say({"type": "http.response.body", "body": b"ok", "more_body": False})


async def _seconds_until_closed(stream: trio.SocketStream) -> float:
    """How long the server took to close `stream` from now, sending nothing more (at most 5 s)."""
    began = trio.current_time()
    with trio.fail_after(5):
        assert await _until_closed(stream) == b""
    return trio.current_time() - began


def _after(seconds: float) -> bytes:
    return b"GET /%s HTTP/1.1\r\nHost: t\r\n\r\n" % str(seconds).encode()


async def test_a_connection_that_never_sends_a_request_is_closed_after_the_keep_alive_timeout() -> None:
    async with _serving(_answered_after, keep_alive_timeout_s=0.5) as address:
        stream = await _connect(address)
        async with stream:
            assert await _seconds_until_closed(stream) >= 0.4


async def test_a_connection_idle_after_its_answer_is_closed_after_the_keep_alive_timeout() -> None:
    async with _serving(_answered_after, keep_alive_timeout_s=0.5) as address:
        stream = await _connect(address)
        async with stream:
            await stream.send_all(_after(0))
            with trio.fail_after(5):
                assert (await _response(stream)).endswith(b"\r\n\r\nok")
            assert await _seconds_until_closed(stream) >= 0.4


async def test_a_connection_asked_again_before_each_timeout_stays_open_past_several_of_them() -> None:
    async with _serving(_answered_after, keep_alive_timeout_s=0.5) as address:
        stream = await _connect(address)
        async with stream:
            for _ in range(6):  # 1.8 s in all, each request 0.3 s after the last answer
                await trio.sleep(0.3)
                await stream.send_all(_after(0))
                with trio.fail_after(5):
                    assert (await _response(stream)).endswith(b"\r\n\r\nok")


async def test_a_request_answered_after_longer_than_the_keep_alive_timeout_is_answered_and_kept() -> None:
    async with _serving(_answered_after, keep_alive_timeout_s=0.5) as address:
        stream = await _connect(address)
        async with stream:
            for seconds in (1.2, 0):  # the timer stops while a request is answered
                await stream.send_all(_after(seconds))
                with trio.fail_after(5):
                    assert (await _response(stream)).endswith(b"\r\n\r\nok")


async def test_at_shutdown_an_idle_connection_closes_at_once_and_a_busy_one_after_its_answer() -> None:
    shutdown = trio.Event()
    async with _serving(_answered_after, keep_alive_timeout_s=30, shutdown=shutdown) as address:
        idle, busy = await _connect(address), await _connect(address)
        async with idle, busy:
            await idle.send_all(_after(0))
            with trio.fail_after(5):
                await _response(idle)
            await busy.send_all(_after(1))
            await trio.sleep(0.2)
            shutdown.set()
            with trio.fail_after(0.7):  # well before the busy one's answer
                assert await _until_closed(idle) == b""
            with trio.fail_after(5):
                answered = await _until_closed(busy)
    assert answered.startswith(b"HTTP/1.1 200") and answered.endswith(b"\r\n\r\nok")
