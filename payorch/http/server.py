"""serve(): the HTTP server, hypercorn's HTTP/1.1 on trio with the bounds its own `serve` lacks.

payorch speaks plain HTTP/1.1 only. The TLS proxy in front terminates TLS and HTTP/2
(docs/operations.md, "The proxy in front"); hypercorn's `serve` would also switch a connection to
HTTP/2 on an `Upgrade: h2c` request or on HTTP/2's prior-knowledge preface, with up to 100
concurrent streams each. Here `Upgrade: h2c` is ignored (the request is answered in HTTP/1.1) and a
request of any HTTP version but 1.0 and 1.1, the preface among them, is answered 505 and the
connection closed. A request with both `Content-Length` and `Transfer-Encoding` is answered 400 and
its connection closed, before the app sees it or anything sent after it (RFC 9112, 6.3). One
connection then runs one request at a time (h11 reads no further than the request being answered),
and a client closing its connection cancels its request: hypercorn tells the app `http.disconnect`,
and quart-trio cancels the request's nursery.

What one client can hold is bounded here:

- connections: at most `max_connections` open on this node and `max_connections_per_address` from
  one address (the TCP peer's: behind a proxy, the proxy's). A connection over either is answered
  503 with `Retry-After` and closed at once, before any of it is read;
- a request's head and body must arrive within `read_timeout_s` of its first byte: a slower one
  is answered 408 (when its head was read) and its connection closed;
- an idle connection is closed after `keep_alive_timeout_s`, timed as hypercorn times it: from a
  connection's opening or its last answer until the head of its next request has arrived whole. One
  task per connection keeps the timer (`_Connection._idle_timeout`), its deadline moved at each
  request and answer; hypercorn's own `TrioSingleTask` starts a new task at every answer and
  cancels it at the next request, a task's start and end per request on the serving thread.

The rest is hypercorn's `hypercorn.trio.run.worker_serve`, without TLS and QUIC: the ASGI lifespan,
the graceful shutdown (`config.graceful_timeout`), one `TCPServer` per connection.
"""

from __future__ import annotations

import json
import logging
import resource
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from math import inf
from typing import Any, cast

import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.events import StreamClosed
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ASGIFramework, ConnectionState, H11SendableEvent, LifespanState
from hypercorn.utils import ShutdownError, parse_socket_addr, raise_shutdown, repr_socket_addr, wrap_app

from payorch.config import ServerSettings

log = logging.getLogger("payorch.http.server")

# Seconds a refused connection may take to accept its 503 before it is closed regardless.
REFUSAL_SEND_S = 1.0
REFUSAL_RETRY_AFTER_S = 1
# Open files the process needs besides its HTTP connections: the database pool, logs, PostgreSQL's
# embedded server's pipes, outgoing calls to providers and webhook receivers.
OTHER_OPEN_FILES = 256

NODE = "node"
ADDRESS = "address"


def _error_answer(
    status: int, reason: str, message: str, *, retry_after_s: int | None = None
) -> tuple[h11.Response, bytes]:
    """An error of shape A (`code` the HTTP status): h11's response, closing the connection, and its body."""
    body: dict[str, Any] = {"error": reason, "message": message, "code": status}
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    if retry_after_s is not None:
        body["retryAfter"] = retry_after_s
        headers.append((b"retry-after", str(retry_after_s).encode()))
    data = json.dumps(body, separators=(",", ":")).encode()
    headers.append((b"content-length", str(len(data)).encode()))
    return h11.Response(status_code=status, headers=headers, reason=reason), data


def _answer_bytes(response: h11.Response, data: bytes) -> bytes:
    """`response` and its body as bytes, written before any request was read."""
    head = b"".join(b"%s: %s\r\n" % (name, value) for name, value in response.headers.raw_items())
    return b"HTTP/1.1 %d %s\r\n%s\r\n%s" % (response.status_code, response.reason, head, data)


TOO_MANY_CONNECTIONS = _answer_bytes(
    *_error_answer(
        503,
        "Service Unavailable",
        "too many connections: retry after retryAfter seconds",
        retry_after_s=REFUSAL_RETRY_AFTER_S,
    )
)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    max_connections_per_address: int
    read_timeout_s: float
    keep_alive_timeout_s: float

    @classmethod
    def of(cls, server: ServerSettings) -> ConnectionLimits:
        return cls(
            max_connections=server.max_connections,
            max_connections_per_address=server.max_connections_per_address,
            read_timeout_s=server.read_timeout_s,
            keep_alive_timeout_s=server.keep_alive_timeout_s,
        )


class ConnectionCount:
    """The open connections of this node, in all and per address."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self._limits = limits
        self.total = 0
        self._per_address: Counter[str] = Counter()

    def admit(self, address: str) -> str | None:
        """Count a connection from `address` and return None; or, when one more is over a limit,
        count nothing and return which: NODE or ADDRESS."""
        if self.total >= self._limits.max_connections:
            return NODE
        if self._per_address[address] >= self._limits.max_connections_per_address:
            return ADDRESS
        self.total += 1
        self._per_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        self._per_address[address] -= 1
        if not self._per_address[address]:
            del self._per_address[address]


def _framed_twice(request: h11.Request) -> bool:
    """Whether `request` says how long its body is both ways, `Content-Length` and
    `Transfer-Encoding`: RFC 9112, 6.3 lets a server reject it, and one that reads it must close the
    connection after answering. payorch rejects it (400) and closes."""
    names = {name for name, _ in request.headers}  # h11 gives them in lower case
    return b"content-length" in names and b"transfer-encoding" in names


class _Http11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1, which never hands the connection over to HTTP/2, and writes an answer's
    head with its body's first bytes: one write to the socket for an answer whose body comes in
    one piece, where hypercorn makes three (the head, the body, and the end of a body whose length
    was given, which is no bytes at all)."""

    _head: bytes = b""  # an answer's head, held until its body's first bytes (or anything else)

    async def _send_h11_event(self, event: H11SendableEvent) -> None:
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError:
            if self.connection.their_state != h11.ERROR:
                raise
            return
        if isinstance(event, h11.Response):
            self._head = data
            return
        if self._head:
            data, self._head = self._head + data, b""
        if data:
            await self.send(RawData(data=data))

    async def stream_send(self, event: StreamEvent) -> None:
        if self._head and isinstance(event, StreamClosed):  # an answer ended with its head alone
            data, self._head = self._head, b""
            await self.send(RawData(data=data))
        await super().stream_send(event)

    async def _check_protocol(self, event: h11.Request) -> None:
        """hypercorn switches to HTTP/2 here; payorch does not. `Upgrade: h2c` is ignored, as a
        server may ignore any upgrade (RFC 9110, 7.8), and the request answered in HTTP/1.1."""

    async def _create_stream(self, request: h11.Request) -> None:
        if request.http_version not in (b"1.0", b"1.1"):  # HTTP/2's preface is `PRI * HTTP/2.0`
            await self._send_error(505, "HTTP Version Not Supported", "only HTTP/1.1 is served here")
            await self.send(Closed())
            return
        if _framed_twice(request):
            # h11 reads such a body as chunked and would keep the connection; a proxy in front that
            # trusted Content-Length would see another request where the body ends (smuggling).
            await self._send_error(
                400, "Bad Request", "a request may not carry both Content-Length and Transfer-Encoding"
            )
            await self.send(Closed())
            return
        await super()._create_stream(request)

    @property
    def reading_request(self) -> bool:
        """Whether part of a request has arrived and the rest has not: its head, or its body."""
        connection = self.connection
        if not isinstance(connection, h11.Connection):
            return False
        if connection.their_state is h11.SEND_BODY:
            return True
        return connection.their_state is h11.IDLE and bool(connection.trailing_data[0])

    async def request_too_slow(self) -> None:
        """Answer 408 if the request's head was read and nothing answered yet."""
        if isinstance(self.connection, h11.Connection) and self.connection.our_state is h11.SEND_RESPONSE:
            await self._send_error(408, "Request Timeout", "the request did not arrive in time")

    async def _send_error(self, status: int, reason: str, message: str) -> None:
        response, data = _error_answer(status, reason, message)
        for event in (response, h11.Data(data=data), h11.EndOfMessage()):
            await self._send_h11_event(event)


class _Http11Only(ProtocolWrapper):
    """hypercorn's choice of protocol, made once: HTTP/1.1 (`_Http11Protocol`)."""

    def __init__(
        self,
        app: AppWrapper,
        config: HypercornConfig,
        context: WorkerContext,
        task_group: TaskGroup,
        state: ConnectionState,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
    ) -> None:
        super().__init__(app, config, context, task_group, state, False, client, server, send, "http/1.1")
        self.protocol = _Http11Protocol(
            self.app,
            self.config,
            self.context,
            self.task_group,
            self.state,
            self.ssl,
            self.client,
            self.server,
            self.send,
        )


class _Connection(TCPServer):
    """One client's connection over plain TCP: hypercorn's, HTTP/1.1 only, each request's head and
    body read within `read_timeout_s` of its first byte."""

    def __init__(
        self,
        app: AppWrapper,
        config: HypercornConfig,
        context: WorkerContext,
        state: LifespanState,
        stream: trio.SocketStream,
        read_timeout_s: float,
    ) -> None:
        super().__init__(app, config, context, state, cast(Any, stream))
        self.socket_stream = stream
        self.read_timeout_s = read_timeout_s
        self.http11: _Http11Protocol
        # The keep-alive timer: `idle` expires keep_alive_timeout_s after the connection last became
        # idle (never while a request is read or answered); `watching` ends the timer's task.
        self.idle = trio.CancelScope()
        self.watching = trio.CancelScope()

    async def run(self) -> None:
        socket = self.socket_stream.socket
        try:
            client = parse_socket_addr(socket.family, socket.getpeername())
            server = parse_socket_addr(socket.family, socket.getsockname())
            async with TaskGroup() as task_group:
                self._task_group = task_group
                self.protocol = _Http11Only(
                    self.app,
                    self.config,
                    self.context,
                    task_group,
                    ConnectionState(self.state),
                    client,
                    server,
                    self.protocol_send,
                )
                self.http11 = cast(_Http11Protocol, self.protocol.protocol)
                await self.protocol.initiate()
                self._idle_from_now()
                task_group.spawn(self._idle_timeout)
                await self._read_data()
        except OSError:
            pass
        finally:
            await self._close()

    async def _read_data(self) -> None:
        began: float | None = None  # when the first byte of the request being read arrived
        while True:
            try:
                with trio.fail_at(inf if began is None else began + self.read_timeout_s):
                    data = await self.stream.receive_some(MAX_RECV)
            except trio.TooSlowError:
                await self.http11.request_too_slow()
                break
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            arrived = trio.current_time()
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
            if not self.http11.reading_request:
                began = None
            elif began is None:
                began = arrived
        # The idle timer would hold the closed connection (its file, its place in the count) until it
        # fired, keep_alive_timeout_s later.
        self.watching.cancel()
        await self.protocol.handle(Closed())

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):  # the connection became idle, or busy: the timer moves
            if event.idle:
                self._idle_from_now()
            else:
                self.idle.deadline = inf
            return
        await super().protocol_send(event)

    def _idle_from_now(self) -> None:
        wait = 0 if self.context.terminated.is_set() else self.config.keep_alive_timeout
        self.idle.deadline = trio.current_time() + wait

    async def _idle_timeout(self) -> None:
        """Close the connection once it has been idle for keep_alive_timeout_s, or is idle once the
        server has terminated (a request being answered first gets its answer), as hypercorn's timer
        does; unless `watching` is cancelled first."""
        with self.watching:
            with self.idle:
                await self.context.terminated.wait()
                if self.idle.deadline == inf:  # busy: closed as soon as it is idle (`_idle_from_now`)
                    await trio.sleep_forever()
            with trio.CancelScope(shield=True):
                await self._initiate_server_close()


async def _serve_connection(
    app: AppWrapper,
    config: HypercornConfig,
    context: WorkerContext,
    state: LifespanState,
    limits: ConnectionLimits,
    count: ConnectionCount,
    refused: Callable[[str], None],
    stream: trio.SocketStream,
) -> None:
    try:
        address = str(stream.socket.getpeername()[0])
    except OSError:  # already gone
        await stream.aclose()
        return
    over = count.admit(address)
    if over is not None:
        refused(over)
        with trio.move_on_after(REFUSAL_SEND_S):
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(TOO_MANY_CONNECTIONS)
        await stream.aclose()
        return
    try:
        await _Connection(app, config, context, state, stream, limits.read_timeout_s)
    finally:
        count.release(address)


def ensure_open_files(limits: ConnectionLimits) -> None:
    """Raise the process's soft limit of open files, up to its hard limit, so that
    `max_connections` connections fit beside the rest; log a warning when they cannot."""
    needed = limits.max_connections + OTHER_OPEN_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < needed:
        log.warning(
            "the open files limit is too low for server.max_connections",
            extra={"openFilesLimit": raised, "maxConnections": limits.max_connections, "needed": needed},
        )


def bound_sockets(config: HypercornConfig) -> list[socket.socket]:
    """A socket for each address of `config.bind`, bound, not listening yet: plain TCP only."""
    sockets = config.create_sockets()
    if sockets.secure_sockets or sockets.quic_sockets:
        raise ValueError("payorch serves plain HTTP/1.1: TLS is the proxy's (docs/operations.md)")
    return sockets.insecure_sockets


async def serve(
    app: ASGIFramework,
    config: HypercornConfig,
    limits: ConnectionLimits,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    refused: Callable[[str], None] = lambda over: None,
    sockets: list[socket.socket] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` on `config.bind` (or on `sockets`, bound: a worker's, handed over by `payorch serve
    --workers`, listening from then on) until `shutdown_trigger` returns, then stop gracefully. Reports the
    bound addresses once it accepts connections; calls `refused` with NODE or ADDRESS for each
    connection refused over a limit."""
    config.keep_alive_timeout = limits.keep_alive_timeout_s
    config.read_timeout = None  # `_Connection` bounds the reading of a request, not every read
    config.alpn_protocols = ["http/1.1"]
    asgi = wrap_app(app, config.wsgi_max_body_size, "asgi")
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(asgi, config, lifespan_state)
    context = WorkerContext(None)
    count = ConnectionCount(limits)

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()

        async with trio.open_nursery() as server_nursery:
            listeners = []
            binds = []
            for sock in bound_sockets(config) if sockets is None else sockets:
                sock.listen(config.backlog)  # connections come to it from now on
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            handler = partial(
                _serve_connection,
                asgi,
                config,
                context,
                ConnectionState(lifespan_state.copy()),
                limits,
                count,
                refused,
            )
            task_status.started(binds)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(
                        partial(trio.serve_listeners, handler, listeners, handler_nursery=server_nursery)
                    )
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors from None
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout

        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
