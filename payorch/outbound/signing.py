"""Signatures on outgoing webhooks, per Standard Webhooks v1 (standardwebhooks.com).

A merchant verifies a delivery with any Standard Webhooks library: the signed content is
`{webhook-id}.{webhook-timestamp}.{body}`, the key is the base64 part of the `whsec_...` secret, the
signature is `v1,<base64 HMAC-SHA256>`. During a rotation overlap the header carries one signature per
secret, space-separated, so a receiver holding either the old or the new secret accepts the delivery.

Signatures are made by `standardwebhooks`, the reference library merchants verify with; payorch
only checks a secret's form first (the library would accept some malformed ones) and joins one
signature per secret. Pure functions: no I/O, no clock (the caller passes the timestamp).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from secrets import token_bytes  # by name: `secrets` is the parameter of `sign`

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
SECRET_RANDOM_BYTES = 32
FINGERPRINT_PREFIX = "sha256:"
FINGERPRINT_HEX_LENGTH = 16
USER_AGENT = "payorch-webhooks/1"


class MalformedSigningSecret(ValueError):
    """A signing secret is not `whsec_` followed by non-empty standard base64."""


def new_signing_secret() -> str:
    """A fresh secret: `whsec_` + standard base64 (with padding) of 32 random bytes (256 bits)."""
    return SECRET_PREFIX + base64.b64encode(token_bytes(SECRET_RANDOM_BYTES)).decode("ascii")


def key_fingerprint(secret: str) -> str:
    """`sha256:` + the first 16 hex characters of SHA-256 of the whole secret text, `whsec_` included.

    Identifies which secret signed a delivery (the `keyFingerprint` of a webhook configuration) without
    revealing it: 64 bits of a hash of a 256-bit secret tell nothing about the secret.
    """
    digest = hashlib.sha256(secret.encode()).hexdigest()
    return FINGERPRINT_PREFIX + digest[:FINGERPRINT_HEX_LENGTH]


def check_secret_form(secret: str) -> None:
    """`MalformedSigningSecret` unless `secret` is `whsec_` + non-empty standard base64."""
    if not secret.startswith(SECRET_PREFIX):
        raise MalformedSigningSecret(f"signing secret does not start with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise MalformedSigningSecret("signing secret is not valid base64 after 'whsec_'") from None
    if not key:
        raise MalformedSigningSecret("signing secret is empty after 'whsec_'")


def sign(secrets: Sequence[str], message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: `v1,<base64 HMAC-SHA256>` per secret, space-separated, in order.

    Each signature is HMAC-SHA256, keyed with the base64-decoded part of the secret after `whsec_`, over
    `f"{message_id}.{timestamp}.".encode() + body`. Pass the current secret first, then the previous one
    while a rotation overlap lasts. Raises `MalformedSigningSecret` for a secret that is not `whsec_` +
    base64, and `ValueError` when `secrets` is empty (an unsigned delivery is never sent).
    """
    if not secrets:
        raise ValueError("at least one signing secret is needed")
    for secret in secrets:
        check_secret_form(secret)
    moment = datetime.fromtimestamp(timestamp, UTC)
    content = body.decode("utf-8")  # payorch's bodies are its own JSON, UTF-8
    return " ".join(Webhook(secret).sign(message_id, moment, content) for secret in secrets)


def webhook_headers(
    secrets: Sequence[str], message_id: str, timestamp: int, body: bytes, fingerprint: str
) -> dict[str, str]:
    """The request headers of one delivery attempt of `body`, signed with `secrets` (see `sign`).

    `webhook-id`, `webhook-timestamp` (Unix seconds as decimal text), `webhook-signature`,
    `webhook-key-fingerprint` (`fingerprint`, the configuration's current key), `content-type:
    application/json` and `user-agent: payorch-webhooks/1`. Header names are lowercase.
    """
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secrets, message_id, timestamp, body),
        "webhook-key-fingerprint": fingerprint,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }
