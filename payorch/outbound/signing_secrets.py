"""Which secrets sign an outgoing webhook: one rule for deliveries and test sends."""

from __future__ import annotations

from datetime import datetime

from payorch.values.secretbox import SecretBox


def signing_secrets(
    box: SecretBox,
    *,
    secret: bytes,
    previous_secret: bytes | None,
    previous_secret_expires_at: datetime | None,
    now: datetime,
) -> list[str]:
    """The configuration's current secret, then, while a rotation's overlap lasts (until
    `previous_secret_expires_at`), the previous one: both sign, so a receiver holding either accepts.
    `secret` and `previous_secret` are sealed as stored; the answer is in the clear."""
    secrets = [box.open(secret)]
    overlapping = previous_secret_expires_at is not None and previous_secret_expires_at > now
    if previous_secret is not None and overlapping:
        secrets.append(box.open(previous_secret))
    return secrets
