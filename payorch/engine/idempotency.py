"""Idempotency keys: what makes two requests "the same", and the rules for a key seen again.

"Same body" means the same parsed JSON, not the same bytes: key order, white space and the way a
number is written (`10.5` or `10.50`) do not matter.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

MAX_KEY_LENGTH = 255


def _canonical(value: Any) -> Any:
    if isinstance(value, Decimal):
        normalized = value.normalize()
        # An integral decimal is the same value as the integer: 10.0 == 10.
        return int(normalized) if normalized == normalized.to_integral_value() else str(normalized)
    if isinstance(value, float):
        return _canonical(Decimal(repr(value)))
    if isinstance(value, dict):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def request_fingerprint(body: Any, *scope: str) -> bytes:
    """SHA-256 over the canonical JSON of `body` and the `scope` (endpoint, path ids)."""
    canonical = json.dumps([list(scope), _canonical(body)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()
