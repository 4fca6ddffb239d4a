"""The HTTP client for outgoing webhooks, and how a reloaded configuration replaces it."""

from __future__ import annotations

import ssl
from functools import lru_cache, partial
from pathlib import Path

import httpx
import trio

from payorch.config import Settings, WebhookSettings
from payorch.development_ca import development_ca_certificate
from payorch.outbound.guarded_transport import GuardedTransport
from payorch.outbound.ssrf import resolve_public_addresses

# Connections open at once by one client; a request beyond this waits for a free one (within the
# attempt's timeout).
MAX_CONNECTIONS = 128
# How long a connection to a receiver stays open, idle, for the next request to it. Reusing one saves
# a TCP and a TLS handshake (round trips to the receiver, and the CPU of a full handshake) on every
# delivery to a merchant whose events come less often than httpx's default of 5 s; 55 s is below the
# 60 s idle timeout common in load balancers. A connection the receiver closed sooner is seen closed
# (readable at its end) and not reused, and an idle connection counts towards `max_connections`: the
# pool closes one to make room for a request elsewhere.
KEEPALIVE_EXPIRY_S = 55.0


def webhook_client(settings: Settings, max_connections: int = MAX_CONNECTIONS) -> httpx.AsyncClient:
    """The HTTP client for webhooks: every connection to an address the SSRF guard allowed
    (`GuardedTransport`), TLS verified against the system CAs plus `webhooks.ca_bundle` (and,
    with `webhooks.allow_loopback`, the development CA under `server.state_dir` if it exists),
    `webhooks.timeout_s` per request, no redirects followed, nothing taken from the environment
    (proxies, .netrc credentials). The delivery supervisor has one of its own, so that test sends
    can never take the connections deliveries need; test sends share the runtime's."""
    webhooks = settings.webhooks
    development_ca = development_ca_certificate(settings.server.state_dir)
    trusted = [
        *([webhooks.ca_bundle] if webhooks.ca_bundle is not None else []),
        *([development_ca] if webhooks.allow_loopback and development_ca.exists() else []),
    ]
    context = tls_context(*trusted)
    resolve = partial(
        resolve_public_addresses,
        allow_private_networks=webhooks.allow_private_networks,
        allow_loopback=webhooks.allow_loopback,
        timeout_s=webhooks.timeout_s,
    )
    transport = GuardedTransport(
        ssl_context=context,
        limits=httpx.Limits(max_connections=max_connections, keepalive_expiry=KEEPALIVE_EXPIRY_S),
        resolve=resolve,
    )
    return httpx.AsyncClient(
        transport=transport, timeout=settings.webhooks.timeout_s, follow_redirects=False, trust_env=False
    )


class CurrentClient:
    """A webhook client that a reloaded configuration replaces: `client` is the one to send with
    now, built from the `webhooks` settings in `built_from`."""

    def __init__(self, client: httpx.AsyncClient, built_from: WebhookSettings) -> None:
        self.client = client
        self.built_from = built_from


async def close_after(client: httpx.AsyncClient, delay_s: float) -> None:
    """Close `client`, replaced, once `delay_s` have passed: what a request already sent on it may
    still take. At once when cancelled (the service stops)."""
    try:
        await trio.sleep(delay_s)
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()


def tls_context(*ca_bundles: Path | None) -> ssl.SSLContext:
    """The TLS settings webhooks are verified with: the system CAs, plus those of each bundle given
    (None: none). Built once per set of bundle files and kept, as reading the system's CAs costs
    tens of milliseconds of CPU; a bundle file that changes is read again."""
    files = tuple((str(path), Path(path).stat().st_mtime_ns) for path in ca_bundles if path is not None)
    return _tls_context(files)


@lru_cache(maxsize=8)
def _tls_context(ca_bundles: tuple[tuple[str, int], ...]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for path, _modified_ns in ca_bundles:
        context.load_verify_locations(cafile=path)
    return context
