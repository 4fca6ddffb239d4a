"""Secrets at rest: provider credentials and signing secrets, encrypted with Fernet.

Fernet is AES-128-CBC with HMAC-SHA256: a stored value cannot be read or altered without the key in
`security.encryption_key`. While the key is being replaced there are several
(`security.encryption_keys`, cryptography's MultiFernet): the first seals, any of them opens, and
`reseal` moves a value sealed under another onto the first (`engine.accounts.key_rotation`).
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


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

    def seal(self, plaintext: str) -> bytes:
        return self._sealing.encrypt(plaintext.encode())

    def open(self, sealed: bytes) -> str:
        try:
            return self._fernet.decrypt(bytes(sealed)).decode()
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
