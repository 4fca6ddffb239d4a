"""Why a webhook attempt got no answer, in words a merchant can act on.

httpx reports most failures to connect as a `ConnectError` whose own message is empty: the reason
is further down its chain of causes (`__cause__`, `__context__`, and the members of an exception
group, such as trio's "all attempts to connect failed"). `failure_text` walks that chain for the
cause that says what happened, and writes it out:

    DNS: shop.example does not resolve from this server (Name or service not known)
    refused: webhook URL host '10.0.0.5' is a non-public address (private): ...   (the SSRF guard)
    connection refused: nothing listens on localhost:8787
    TLS: certificate verify failed: self-signed certificate (payorch trusts ...)
    TLS: localhost:8787 does not speak TLS (wrong version number): is it an http:// endpoint?
    timed out after 15 s in the TLS handshake with localhost:8787

Never an empty text: what no rule knows is written as its class name and message, or, when the
message is empty, the class names down its chain of causes.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from payorch.outbound.ssrf import UnresolvableHost, UnsafeWebhookUrl

# How far an attempt got, as httpcore's trace events tell it: the step that was under way.
CONNECTING, TLS_HANDSHAKE, SENDING, WAITING, POOL = "connecting", "tls", "sending", "waiting", "pool"
_STEPS = {
    "connect_tcp": CONNECTING,
    "start_tls": TLS_HANDSHAKE,
    "send_request_headers": SENDING,
    "send_request_body": SENDING,
    "receive_response_headers": WAITING,
}
_TIMEOUT_STAGES = {
    httpx.ConnectTimeout: CONNECTING,
    httpx.WriteTimeout: SENDING,
    httpx.ReadTimeout: WAITING,
    httpx.PoolTimeout: POOL,
}
# OpenSSL's verification errors that mean "this certificate's issuer is not trusted here".
_UNTRUSTED_ISSUER = {
    18,  # self-signed certificate
    19,  # self-signed certificate in certificate chain
    20,  # unable to get local issuer certificate
    21,  # unable to verify the first certificate
}
_E = TypeVar("_E", bound=BaseException)
_OPENSSL_DECORATION = re.compile(r"^\[[^\]]*\]\s*|\s*\(_ssl\.c:\d+\)$")


@dataclass
class Progress:
    """The step of the attempt under way, kept up to date by httpcore's `trace` extension (pass
    `trace` as `extensions={"trace": progress.trace}`); None before the first step."""

    stage: str | None = None

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        # Events are "<layer>.<step>.started|complete|failed", e.g. "connection.start_tls.started".
        step, _, phase = event.partition(".")[2].rpartition(".")
        if phase == "started" and step in _STEPS:
            self.stage = _STEPS[step]


def where(host: str, port: int) -> str:
    """`host:port` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def timed_out(timeout_s: float, stage: str | None, at: str) -> str:
    """The text of an attempt that had no answer within `timeout_s`, naming the step it was at."""
    during = {
        CONNECTING: f" connecting to {at}",
        TLS_HANDSHAKE: f" in the TLS handshake with {at}",
        SENDING: f" sending the request to {at}",
        WAITING: f" waiting for {at} to answer",
        POOL: " waiting for a free connection",
    }
    return f"timed out after {timeout_s:g} s{during.get(stage or '', '')}"


def failure_text(error: BaseException, *, at: str, timeout_s: float, stage: str | None) -> str:
    """What `error` (raised by the attempt to reach `at`, `host:port`) means, in words; `stage` is
    the step the attempt was at (`Progress`), for a timeout."""
    chain = list(_causes(error))
    unresolvable = _first(chain, UnresolvableHost)
    if unresolvable is not None:
        return f"DNS: {unresolvable.host} does not resolve from this server ({unresolvable.detail})"
    refused = _first(chain, UnsafeWebhookUrl)
    if refused is not None:
        return f"refused: {refused}"
    if isinstance(error, httpx.TimeoutException):
        return timed_out(timeout_s, stage or _TIMEOUT_STAGES.get(type(error)), at)
    tls = _tls_text(chain, at)
    if tls is not None:
        return tls
    if _first(chain, ConnectionRefusedError) is not None:
        return f"connection refused: nothing listens on {at}"
    if _first(chain, ConnectionResetError) is not None:
        return f"connection reset by {at}"
    system = next((cause for cause in chain if isinstance(cause, OSError) and cause.strerror), None)
    if system is not None:
        return f"connection to {at} failed: {system.strerror}"
    message = _message(error)
    if message:
        return f"{type(error).__name__}: {message}"
    found = next((cause for cause in chain[1:] if _message(cause)), None)
    names = " <- ".join(type(cause).__name__ for cause in chain)
    return names if found is None else f"{names}: {_message(found)}"


def _tls_text(chain: list[BaseException], at: str) -> str | None:
    verification = _first(chain, ssl.SSLCertVerificationError)
    if verification is not None:
        text = f"TLS: certificate verify failed: {verification.verify_message}"
        if verification.verify_code in _UNTRUSTED_ISSUER:
            text += " (payorch trusts the system's CAs and those of webhooks.ca_bundle)"
        return text
    failure = _first(chain, ssl.SSLError)
    if failure is None:
        return None
    if failure.reason == "WRONG_VERSION_NUMBER":
        return f"TLS: {at} does not speak TLS (wrong version number): is it an http:// endpoint?"
    if isinstance(failure, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return f"TLS: {at} closed the connection during the TLS handshake"
    detail = failure.args[1] if len(failure.args) > 1 else str(failure)
    return f"TLS: {_OPENSSL_DECORATION.sub('', str(detail)) or type(failure).__name__}"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, then what caused it, breadth first, each once: `__cause__`, `__context__`, and the
    members of an exception group."""
    seen: set[int] = set()
    queue = [error]
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            queue.extend(current.exceptions)
        queue.extend(cause for cause in (current.__cause__, current.__context__) if cause is not None)


def _first(chain: list[BaseException], kind: type[_E]) -> _E | None:
    return next((cause for cause in chain if isinstance(cause, kind)), None)


def _message(error: BaseException) -> str:
    return str(error).strip()
