"""The sandbox's webhook signature scheme, in the style of Stripe's.

    Sandbox-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "{t}.{raw body}" with the endpoint's secret>

Several `v1=` entries may appear (any one matching is enough); unknown entries are ignored. A
signature older or newer than the tolerance is refused, so a captured delivery cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

SIGNATURE_HEADER = "Sandbox-Signature"
TOLERANCE_S = 300
# Unix seconds have 10 digits until the year 2286: a longer `t=` is malformed, not a time to compare
# (a 400-digit one would not even convert to float).
_MAX_TIMESTAMP_DIGITS = 12
_SECRET_PREFIX = "whsec_sbx_"  # noqa: S105 - a prefix, not a secret


class SignatureInvalid(Exception):
    """The signature is missing, malformed, wrong or outside the tolerance."""


def new_signing_secret() -> str:
    """A fresh endpoint secret: `whsec_sbx_` + 32 random bytes, url-safe base64."""
    return _SECRET_PREFIX + secrets.token_urlsafe(32)


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """The `Sandbox-Signature` value for `body` sent at `timestamp`."""
    return f"t={timestamp},v1={_digest(secret, timestamp, body)}"


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """`name`'s value in `headers`, matched without regard to case (any mapping, not only HTTP ones)."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def verify_signature(
    headers: Mapping[str, str], body: bytes, secret: str, *, now: float, tolerance_s: int = TOLERANCE_S
) -> None:
    """Return when `body` carries a valid signature by `secret` made within `tolerance_s` of `now`;
    raise `SignatureInvalid` otherwise."""
    value = header_value(headers, SIGNATURE_HEADER)
    if not value:
        raise SignatureInvalid(f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in value.split(","):
        key, _, item = part.strip().partition("=")
        if key == "t" and item.isascii() and item.isdigit() and len(item) <= _MAX_TIMESTAMP_DIGITS:
            timestamp = int(item)
        elif key == "v1":
            candidates.append(item)
    if timestamp is None or not candidates:
        raise SignatureInvalid(f"malformed {SIGNATURE_HEADER} header")
    if abs(now - timestamp) > tolerance_s:
        raise SignatureInvalid("signature timestamp outside the tolerance")
    expected = _digest(secret, timestamp, body).encode()
    # Compare with every candidate, without stopping early: the time taken says nothing about which matched.
    matched = False
    for candidate in candidates:
        matched |= hmac.compare_digest(expected, candidate.encode())
    if not matched:
        raise SignatureInvalid("signature does not match")
