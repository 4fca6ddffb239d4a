"""Admin passwords: argon2id hashes through libpass. Hashing is slow on purpose, so it runs in a thread."""

from __future__ import annotations

import unicodedata
from functools import cache

import trio
from passlib.hash import argon2

_hasher = argon2.using(type="ID")

PASSWORD_MIN_LENGTH = 16
PASSWORD_MAX_LENGTH = 32


def _blank(character: str) -> bool:
    # White space, and characters that show nothing at all (controls, zero-width and other format
    # characters): a password of these alone is as good as empty.
    return character.isspace() or unicodedata.category(character) in ("Cc", "Cf")


def password_weakness(password: str) -> str | None:
    """Why `password` is refused whatever its length, or None when it is not.

    Refused: one character repeated (`aaaa...`), and nothing but blanks (white space, control or
    invisible format characters). The length limits are checked apart, where the password arrives.
    """
    if all(_blank(character) for character in password):
        return "must not consist only of white space or invisible characters"
    if len(set(password)) == 1:
        return "must not be one character repeated"
    return None


async def hash_password(password: str) -> str:
    return str(await trio.to_thread.run_sync(_hasher.hash, password))


@cache
def _dummy_hash() -> str:
    """Verified when the e-mail is unknown, so a login takes as long whether or not the account
    exists. Made at the first such login (in its thread), not when the module is imported: every
    command of the CLI imports this module, and most never verify a password."""
    return str(_hasher.hash("payorch-no-such-account-password"))


async def verify_password(password: str, stored_hash: str | None) -> bool:
    """Whether `password` matches `stored_hash`; with no hash, spend the same time and say no."""
    candidate = stored_hash if stored_hash is not None else await trio.to_thread.run_sync(_dummy_hash)
    matches = bool(await trio.to_thread.run_sync(_hasher.verify, password, candidate))
    return matches and stored_hash is not None
