"""Secrets at rest: provider credentials and signing secrets, encrypted with Fernet.

Fernet is AES-128-CBC with HMAC-SHA256: a stored value cannot be read or altered without the key in
`security.encryption_key`.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken


class UnreadableSecret(Exception):
    """A stored secret does not decrypt with the configured key (wrong or rotated key)."""


class SecretBox:
    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode())

    def seal(self, plaintext: str) -> bytes:
        return self._fernet.encrypt(plaintext.encode())

    def open(self, sealed: bytes) -> str:
        try:
            return self._fernet.decrypt(bytes(sealed)).decode()
        except InvalidToken:
            raise UnreadableSecret("stored secret does not decrypt with security.encryption_key") from None


def key_fingerprint(api_key: str) -> str:
    """First 8 and last 4 characters with the middle redacted: enough to recognise, never to use."""
    if len(api_key) <= 12:
        return "*" * len(api_key)
    return f"{api_key[:8]}...{api_key[-4:]}"
