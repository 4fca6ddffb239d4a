"""Credentials payorch issues: API keys and invite tokens, shown once and stored only as hashes."""

from __future__ import annotations

import hashlib
import re
import secrets
import string

API_KEY_PREFIX = "sk_"
API_KEY_RANDOM_LENGTH = 40
API_KEY_SHOWN_PREFIX_LENGTH = 12
_BASE62 = string.digits + string.ascii_letters
_API_KEY_SHAPE = re.compile(rf"{API_KEY_PREFIX}[0-9A-Za-z]{{{API_KEY_RANDOM_LENGTH}}}")


def new_api_key() -> str:
    """`sk_` followed by 40 random base62 characters (about 238 bits)."""
    return API_KEY_PREFIX + "".join(secrets.choice(_BASE62) for _ in range(API_KEY_RANDOM_LENGTH))


def looks_like_api_key(value: str) -> bool:
    """Whether `value` has an API key's shape: `sk_` and 40 base62 characters."""
    return _API_KEY_SHAPE.fullmatch(value) is not None


def api_key_prefix(key: str) -> str:
    """The leading characters shown in listings so a merchant can tell keys apart."""
    return key[:API_KEY_SHOWN_PREFIX_LENGTH]


def new_invite_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> bytes:
    """SHA-256 of a high-entropy token: what is stored and looked up instead of the token."""
    return hashlib.sha256(token.encode()).digest()
