"""One signed POST to a webhook endpoint, and what came of it, whatever the receiver does.

The answer is read within bounds: the status line and headers (kept within `text.storable_headers`'
bounds), then at most `RESPONSE_EXCERPT` bytes of the body, streamed, after which the response is
closed (the rest is never read; the connection is dropped rather than drained). The whole attempt,
from the URL check to the last byte of the excerpt, ends within `timeout_s`. Once the status has
arrived it stands: a body that breaks off or dawdles only shortens the excerpt. An attempt without
an answer says why in words (`failures`): DNS, the SSRF guard, a refused connection, TLS, a timeout
and the step it cut short.
The result also carries the headers payorch sent (the signature among them, never a secret), so a
delivery's log can show each attempt as it went out; its body is the event's stored body
(`request_body`), the same bytes on every attempt.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

import httpx
import trio

from payorch.jsonexact import dumps_exact
from payorch.outbound.failures import Progress, failure_text, timed_out, where
from payorch.outbound.retry_after import retry_after_s
from payorch.outbound.signing import webhook_headers
from payorch.outbound.ssrf import UnsafeWebhookUrl, webhook_host_and_port
from payorch.outbound.text import storable_excerpt, storable_headers, storable_text
from payorch.values.clock import Clock

log = logging.getLogger("payorch.outbound")

RESPONSE_EXCERPT = 4096  # bytes of a receiver's body kept (stored for deliveries, shown for tests)
ERROR_LENGTH = 500  # characters of an error description kept
# Statuses as HTTP has them: three digits. Anything else is not an answer payorch can store or judge.
_STATUS_RANGE = range(100, 1000)
# Failure reasons (a metric label: a fixed, small set).
HTTP_STATUS, TIMEOUT, NETWORK, REFUSED, INTERNAL = "http_status", "timeout", "network", "refused", "internal"

Headers = tuple[tuple[str, str], ...]  # (name, value) pairs in order, names lowercase


def request_body(payload: Mapping[str, Any]) -> bytes:
    """The bytes an event's stored body (`outbox_events.payload`) goes out as, on every attempt."""
    return dumps_exact(payload).encode()


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt came to. Every text is fit to store (`outbound.text`)."""

    status_code: int | None  # the receiver's status; None when it gave no (valid) answer
    response_excerpt: str | None  # the first RESPONSE_EXCERPT bytes of its body, as text
    retry_after_s: float | None  # its `Retry-After` on 429 or 503, unbounded; None when absent or invalid
    error: str | None  # why there was no answer, in words (`failures`); None when there was one
    failure_reason: str | None  # None on 2xx; else HTTP_STATUS, TIMEOUT, NETWORK, REFUSED or INTERNAL
    latency_ms: int
    request_headers: Headers | None = None  # what payorch sent; None when it sent nothing
    response_headers: Headers | None = None  # the receiver's, bounded; None with no answer

    @property
    def succeeded(self) -> bool:
        return self.failure_reason is None


@dataclass
class _Answer:
    """What has arrived so far; filled in as the response streams."""

    status_code: int | None = None
    retry_after_s: float | None = None
    headers: Headers = ()
    body: bytes = b""


async def send_signed(
    client: httpx.AsyncClient,
    *,
    url: str,
    secrets: Sequence[str],
    fingerprint: str,
    message_id: str,
    body: bytes,
    timeout_s: float,
    log_context: Mapping[str, str],
    clock: Clock,
    allow_loopback: bool = False,
) -> AttemptResult:
    """POST `body` signed with `secrets` to `url` and report the answer; never raises (except
    `trio.Cancelled`). The URL's shape is checked again here (plain http to a loopback host only
    with `allow_loopback`), its host's addresses when `client` connects (DNS may have changed since
    the configuration was saved; see `webhook_client`). An unexpected error is logged with
    `log_context` (e.g. the delivery id) and reported as INTERNAL."""
    started = trio.current_time()
    answer = _Answer()
    progress = Progress()
    at = ""
    error: str | None = None
    reason: str | None = None
    sent: Headers | None = None
    try:
        at = where(*webhook_host_and_port(url, allow_loopback=allow_loopback))
        headers = webhook_headers(secrets, message_id, int(clock.now().timestamp()), body, fingerprint)
        # The excerpt is of the body as sent: a compressed answer could inflate far beyond what was read.
        headers["accept-encoding"] = "identity"
        sent = tuple(headers.items())
        with trio.move_on_after(timeout_s) as deadline:
            await _post_and_read_excerpt(client, url, headers, body, answer, clock, progress)
        if deadline.cancelled_caught and answer.status_code is None:
            error, reason = timed_out(timeout_s, progress.stage, at), TIMEOUT
    except (UnsafeWebhookUrl, httpx.HTTPError, OSError) as failure:  # ssl.SSLError is an OSError
        error = failure_text(failure, at=at, timeout_s=timeout_s, stage=progress.stage)
        reason = _reason(failure)
    except Exception as unexpected:
        # A bug, or something no one foresaw: it fails this attempt and nothing else.
        log.exception("webhook attempt failed inside payorch", extra=dict(log_context))
        error, reason = f"internal error: {type(unexpected).__name__}", INTERNAL
    latency_ms = round((trio.current_time() - started) * 1000)
    if answer.status_code is None:
        return AttemptResult(
            status_code=None,
            response_excerpt=None,
            retry_after_s=None,
            error=storable_text(error or "no answer", ERROR_LENGTH),
            failure_reason=reason or NETWORK,
            latency_ms=latency_ms,
            request_headers=sent,
        )
    # The status arrived: it is the outcome, whatever happened to the body after it.
    succeeded = 200 <= answer.status_code < 300
    return AttemptResult(
        status_code=answer.status_code,
        response_excerpt=storable_excerpt(answer.body),
        retry_after_s=answer.retry_after_s,
        error=None,
        failure_reason=None if succeeded else HTTP_STATUS,
        latency_ms=latency_ms,
        request_headers=sent,
        response_headers=answer.headers,
    )


def _reason(failure: Exception) -> str:
    if isinstance(failure, UnsafeWebhookUrl):
        return REFUSED  # the SSRF guard, or a host that does not resolve
    if isinstance(failure, httpx.TimeoutException):
        return TIMEOUT
    return NETWORK


async def _post_and_read_excerpt(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: bytes,
    answer: _Answer,
    clock: Clock,
    progress: Progress,
) -> None:
    extensions = {"trace": progress.trace}
    async with client.stream("POST", url, content=body, headers=headers, extensions=extensions) as response:
        if response.status_code not in _STATUS_RANGE:
            raise httpx.RemoteProtocolError(f"invalid HTTP status code {response.status_code}")
        answer.status_code = response.status_code
        answer.headers = storable_headers(response.headers.raw)
        value = response.headers.get("retry-after")
        if response.status_code in (429, 503) and value is not None:
            answer.retry_after_s = retry_after_s(value, clock.now())
        excerpt = bytearray()
        try:
            # Raw: the bytes as sent (no decoding). An async generator, closed when left early.
            raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
            async with aclosing(raw) as chunks:
                async for chunk in chunks:
                    excerpt += chunk[: RESPONSE_EXCERPT - len(excerpt)]
                    if len(excerpt) >= RESPONSE_EXCERPT:
                        break  # leaving the block closes the response: the rest is never read
        except httpx.HTTPError:
            pass  # the body broke off after the status: keep what arrived
        finally:
            answer.body = bytes(excerpt)
