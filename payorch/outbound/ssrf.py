"""The SSRF guard for merchant webhook URLs: payorch posts only to public HTTPS endpoints.

A webhook URL is a merchant-chosen address payorch connects to from inside its own network. Without this
guard a merchant could make payorch post to its loopback, to private services, or to the cloud metadata
endpoint (169.254.169.254). A URL is accepted when it is `https`, carries no credentials, and every
address its host resolves to is public. Two settings lift parts of this, and every refusal names the
one that would lift it: `webhooks.allow_private_networks` the address rule (for tests and private
deployments), `webhooks.allow_loopback` the address rule for loopback addresses only, and the https
rule for loopback hosts (`localhost`, 127.0.0.0/8, `::1`): local development, where payorch refuses
to start unless only its own machine reaches it (`config.check_loopback_webhooks`).

The URL is parsed with httpx, the client that delivers, so the host checked is the host connected to.
A check is a snapshot: DNS may answer differently at delivery time, so the webhook client checks
again inside each connection and connects only to the addresses it checked (`guarded_transport`).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import httpx
import trio

from payorch.values.web_urls import LOOPBACK_NAME, is_loopback_host

MAX_URL_LENGTH = 2048
HTTPS_PORT = 443
HTTP_PORT = 80
DEFAULT_RESOLVE_TIMEOUT_S = 10.0

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges the `ipaddress` properties below do not all cover on every supported Python.
_NON_PUBLIC_IPV4 = (
    ipaddress.IPv4Network("0.0.0.0/8"),  # "this network"; 0.0.0.0 reaches the local host on Linux
    ipaddress.IPv4Network("100.64.0.0/10"),  # carrier-grade NAT, shared address space
)
# IPv6 forms that carry an IPv4 address a packet may end up at: NAT64 well-known prefix (RFC 6052).
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# A DNS name: dot-separated labels of letters, digits, hyphens (underscores occur in real names).
_HOSTNAME = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)(\.(?!-)[a-z0-9_-]{1,63}(?<!-))*\.?")


class UnsafeWebhookUrl(ValueError):
    """A webhook URL payorch will not post to; the message says why, fit to show the merchant, and
    names the setting that would allow it when there is one."""


class UnresolvableHost(UnsafeWebhookUrl):
    """The host of a webhook URL does not resolve from this server (`detail`: what DNS said)."""

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(f"webhook URL host {host!r} does not resolve from this server ({detail})")
        self.host = host
        self.detail = detail


def _allowing(setting: str) -> str:
    return f"set webhooks.{setting} = true to allow it"


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def webhook_host_and_port(url: str, *, allow_loopback: bool = False) -> tuple[str, int]:
    """The host (ASCII: IDNA-encoded name, or IP literal without brackets) and port a delivery connects to.

    Raises `UnsafeWebhookUrl` unless `url` is at most 2048 characters, `https` (or, with
    `allow_loopback`, `http` to a loopback host: `localhost`, 127.0.0.0/8, `::1`), names a
    well-formed host, has no userinfo (`user:pass@`), and has a port in 1..65535 when one is given
    (443 for https, 80 for http, otherwise).
    """
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeWebhookUrl(f"webhook URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise UnsafeWebhookUrl(f"webhook URL is not a valid URL: {error}") from None
    if parsed.scheme not in ("https", "http"):
        raise UnsafeWebhookUrl("webhook URL must use https")
    # Both parsers: httpx drops an empty userinfo (`https://@host/`), urlsplit reads `\` differently.
    if parsed.userinfo or "@" in urlsplit(url).netloc:
        raise UnsafeWebhookUrl("webhook URL must not contain a user name or password")
    host = parsed.raw_host.decode("ascii").lower()
    if not host:
        raise UnsafeWebhookUrl("webhook URL has no host")
    if _ip_literal(host) is None and (len(host) > 253 or not _HOSTNAME.fullmatch(host)):
        raise UnsafeWebhookUrl(f"webhook URL host {host!r} is not a valid host name")
    if parsed.scheme == "http":
        if not is_loopback_host(host):
            raise UnsafeWebhookUrl(
                "webhook URL must use https (plain http only to a loopback host, for local "
                "development with webhooks.allow_loopback = true)"
            )
        if not allow_loopback:
            raise UnsafeWebhookUrl(
                f"webhook URL must use https: plain http to the loopback host {host!r} is for local "
                f"development only; {_allowing('allow_loopback')}"
            )
    default_port = HTTPS_PORT if parsed.scheme == "https" else HTTP_PORT
    port = default_port if parsed.port is None else parsed.port
    if not 1 <= port <= 65535:
        raise UnsafeWebhookUrl(f"webhook URL port {port} is out of range")
    return host, port


def non_public_kind(address: IPAddress) -> str | None:
    """What makes `address` unfit for a webhook (`"loopback"`, `"private"`, ...), or None when it is public.

    IPv4 addresses carried inside IPv6 (IPv4-mapped `::ffff:a.b.c.d`, 6to4 `2002::/16`, Teredo, NAT64
    `64:ff9b::/96`) are judged by the IPv4 address they carry, as well as by the IPv6 address itself.
    """
    if isinstance(address, ipaddress.IPv6Address):
        carried = [address.ipv4_mapped, address.sixtofour]
        if address.teredo is not None:
            carried.append(address.teredo[1])
        if address in _NAT64:
            carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        for ipv4 in carried:
            if ipv4 is not None and (kind := non_public_kind(ipv4)) is not None:
                return f"{kind}, inside the IPv6 address {address}"
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        (
            "carrier-grade NAT or this-network",
            isinstance(address, ipaddress.IPv4Address) and any(address in net for net in _NON_PUBLIC_IPV4),
        ),
        # Whatever else the flags above miss on some Python version: not globally routable.
        ("not globally routable", not address.is_global),
    )
    return next((kind for kind, matches in checks if matches), None)


async def _resolve(host: str, port: int, timeout_s: float) -> list[str]:
    if _ip_literal(host) is not None:
        return [host]  # an IP literal is its own answer: no DNS query
    with trio.move_on_after(timeout_s):
        try:
            answers = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
        except OSError as error:  # socket.gaierror is an OSError
            raise UnresolvableHost(host, error.strerror or type(error).__name__) from None
        except UnicodeError:
            raise UnresolvableHost(host, "not a name DNS can look up") from None
        # sockaddr[0] is the address text (IPv6 may carry a `%scope`); keep the resolver's order.
        return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in answers))
    raise UnresolvableHost(host, f"no answer within {timeout_s:g} s")


async def resolve_public_addresses(
    host: str,
    port: int,
    *,
    allow_private_networks: bool,
    allow_loopback: bool = False,
    timeout_s: float = DEFAULT_RESOLVE_TIMEOUT_S,
) -> list[str]:
    """The addresses `host` resolves to (an IP literal: itself, without DNS), in the resolver's order.

    Raises `UnresolvableHost` when `host` does not resolve within `timeout_s`, and `UnsafeWebhookUrl`
    when ANY of its addresses is not public, unless `allow_private_networks`: loopback, private,
    link-local, multicast, reserved, unspecified, carrier-grade NAT (100.64.0.0/10), 0.0.0.0/8, or an
    IPv6 form carrying one of those (see `non_public_kind`); loopback addresses pass with
    `allow_loopback` too. One bad address refuses the host, since the connection may go to any of
    them. `localhost` must resolve to loopback addresses only.
    """
    addresses = await _resolve(host, port, timeout_s)
    if not addresses:
        raise UnresolvableHost(host, "no address")
    if host == LOOPBACK_NAME and not all(_is_loopback(address) for address in addresses):
        raise UnsafeWebhookUrl(f"webhook URL host {host!r} resolves to an address that is not loopback")
    if allow_private_networks:
        return addresses
    for address in addresses:
        kind = non_public_kind(ipaddress.ip_address(address))
        if kind is None or (kind == "loopback" and allow_loopback):
            continue
        # For a name the address is left out: it would tell merchants about payorch's internal DNS.
        where = "is" if _ip_literal(host) is not None else "resolves to"
        setting = "allow_loopback" if kind == "loopback" else "allow_private_networks"
        development = " (local development only)" if kind == "loopback" else ""
        raise UnsafeWebhookUrl(
            f"webhook URL host {host!r} {where} a non-public address ({kind}): payorch posts only to "
            f"public addresses; {_allowing(setting)}{development}"
        )
    return addresses


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


async def check_webhook_url(url: str, *, allow_private_networks: bool, allow_loopback: bool = False) -> None:
    """Returns when payorch may post to `url`: its shape is safe (`webhook_host_and_port`) and its
    host resolves only to public addresses (`resolve_public_addresses`; loopback ones too with
    `allow_loopback`, any with `allow_private_networks`). Raises `UnsafeWebhookUrl` otherwise."""
    host, port = webhook_host_and_port(url, allow_loopback=allow_loopback)
    await resolve_public_addresses(
        host, port, allow_private_networks=allow_private_networks, allow_loopback=allow_loopback
    )
