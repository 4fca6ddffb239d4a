"""Secrets at rest: provider credentials and signing secrets, encrypted with Fernet.

Fernet is AES-128-CBC with HMAC-SHA256: a stored value cannot be read or altered without the key in
`security.encryption_key`. While the key is being replaced there are several
(`security.encryption_keys`, cryptography's MultiFernet): the first seals, any of them opens, and
`reseal` moves a value sealed under another onto the first (`engine.accounts.key_rotation`).

A value opened once is kept opened, for the process's life, among the last `OPENED_KEPT` opened:
every create and every webhook delivery opens its account's credentials or its endpoint's signing
secret, and Fernet's check and decryption cost about 40 us each time. It holds nothing the process
could not open again with the keys it holds anyway, and a value that no key opens is never kept
(each try fails again). The keys are fixed for a box's life (`security.encryption_keys` changes
with a restart), so a value kept stays the one its keys give.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

# How many opened values a box keeps: every linked account's credentials and every webhook
# endpoint's signing secret that is in use, on a node of many merchants; past it the least recently
# opened goes (and costs one decryption when next opened).
OPENED_KEPT = 4096


class UnreadableSecret(Exception):
    """A stored secret does not decrypt with any configured key (wrong or removed key)."""


class SecretBox:
    def __init__(self, keys: str | Sequence[str]) -> None:
        """`keys`: one Fernet key, or several with the one that seals first."""
        listed = [keys] if isinstance(keys, str) else list(keys)
        if not listed:
            raise ValueError("SecretBox needs at least one key")
        self._sealing = Fernet(listed[0].encode())
        self._fernet = MultiFernet([Fernet(key.encode()) for key in listed])
        # The C lru_cache: safe from any thread, and an exception (no key opens it) is not kept.
        self._opened = functools.lru_cache(maxsize=OPENED_KEPT)(self._decrypt)

    def seal(self, plaintext: str) -> bytes:
        return self._sealing.encrypt(plaintext.encode())

    def open(self, sealed: bytes) -> str:
        return self._opened(bytes(sealed))

    def _decrypt(self, sealed: bytes) -> str:
        try:
            return self._fernet.decrypt(sealed).decode()
        except InvalidToken:
            raise UnreadableSecret("stored secret does not decrypt with security.encryption_keys") from None

    def reseal(self, sealed: bytes) -> bytes | None:
        """`sealed` sealed anew under the first key (its plaintext and timestamp kept), or None when
        it is under the first key already. `UnreadableSecret` when no key opens it."""
        try:
            self._sealing.decrypt(bytes(sealed))
        except InvalidToken:
            pass
        else:
            return None
        try:
            return self._fernet.rotate(bytes(sealed))
        except InvalidToken:
            raise UnreadableSecret("stored secret does not decrypt with security.encryption_keys") from None


def key_fingerprint(api_key: str) -> str:
    """First 8 and last 4 characters with the middle redacted: enough to recognise, never to use."""
    if len(api_key) <= 12:
        return "*" * len(api_key)
    return f"{api_key[:8]}...{api_key[-4:]}"
