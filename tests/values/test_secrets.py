"""API keys and invite tokens."""

from __future__ import annotations

import hashlib

from payorch.values.secrets import (
    api_key_prefix,
    looks_like_api_key,
    new_api_key,
    new_invite_token,
    token_hash,
)


def test_api_key_is_sk_and_40_base62_characters() -> None:
    key = new_api_key()
    assert key.startswith("sk_") and len(key) == 43 and key[3:].isalnum()
    assert looks_like_api_key(key)


def test_api_keys_do_not_repeat() -> None:
    assert len({new_api_key() for _ in range(1000)}) == 1000


def test_prefix_is_the_first_12_characters() -> None:
    key = new_api_key()
    assert api_key_prefix(key) == key[:12]


def test_malformed_keys_are_recognised() -> None:
    assert not looks_like_api_key("sk_short")
    assert not looks_like_api_key("pk_" + "a" * 40)
    assert not looks_like_api_key("sk_" + "a" * 39 + "-")


def test_token_hash_is_sha256() -> None:
    token = new_invite_token()
    assert token_hash(token) == hashlib.sha256(token.encode()).digest()
    assert len(token) >= 40
