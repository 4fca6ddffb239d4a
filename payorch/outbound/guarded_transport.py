"""The webhook client connects only where the SSRF guard allowed, to the very addresses it checked.

Checking a host name and then letting the HTTP client resolve it again leaves a window: DNS may
answer a public address to the check and a private one to the connection (DNS rebinding). So the
check happens inside the connection. `GuardedBackend` is the network backend of the webhook
client's connection pool: for each new connection it resolves the host once with the guard
(`ssrf.resolve_public_addresses`), which refuses the host unless every address is allowed, and
connects to those addresses only, in the resolver's order. TLS still verifies the certificate
against the host name in the URL, and pooled connections are keyed by that name.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable

import httpcore
import httpx

# (host, port) -> the addresses that host may be reached at; raises `ssrf.UnsafeWebhookUrl` if none.
Resolver = Callable[[str, int], Awaitable[list[str]]]
SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Trio's network backend, connecting to a host only at the addresses `resolve` allowed."""

    def __init__(self, resolve: Resolver) -> None:
        self._resolve = resolve
        self._trio = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: Exception | None = None
        for address in await self._resolve(host, port):
            try:
                return await self._trio.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error  # the next address may answer
        raise failure or httpcore.ConnectError(f"{host} has no address to connect to")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's interface
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are delivered over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._trio.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose connections go through `GuardedBackend`.
    No proxy from the environment: a proxy would connect on our behalf, unchecked."""

    def __init__(self, *, ssl_context: ssl.SSLContext, limits: httpx.Limits, resolve: Resolver) -> None:
        super().__init__(verify=ssl_context, limits=limits, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(resolve),
        )
