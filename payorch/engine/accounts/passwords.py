"""Admin passwords: argon2id hashes through libpass. Hashing is slow on purpose and takes memory on
purpose, so it runs in threads of its own share, at most `PasswordHasher`'s turns at once; a login or
signup that finds every turn taken is answered 503 before any hash starts.

The parameters are OWASP's (Password Storage Cheat Sheet) first argon2id choice, m = 46 MiB, t = 1,
p = 1, chosen from a measurement on the service's machine (docs/operations.md, "Password hashing"):
about 43 ms of one core a hash, and its 46 MiB given back to the system as soon as it ends (an
allocation above glibc's 32 MiB mmap ceiling is always its own mapping; 19 MiB, OWASP's second
choice, stayed in each thread's heap after the hash). Hashes made with other parameters (the
64 MiB, 4-lane ones before this) keep verifying: argon2 writes its parameters into each hash.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Literal

import trio
from passlib.hash import argon2

from payorch.values.errors import ServiceBusy

HASH_MEMORY_KIB = 47104  # 46 MiB
HASH_TIME_COST = 1
HASH_LANES = 1
_hasher = argon2.using(type="ID", memory_cost=HASH_MEMORY_KIB, rounds=HASH_TIME_COST, parallelism=HASH_LANES)
# When a login or signup that found every turn taken is told to come back: a turn is one hash or
# two (an unknown e-mail's dummy hash, then its verification), tens of milliseconds.
BUSY_RETRY_AFTER_S = 1

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


def hashes_at_once(setting: int | Literal["auto"]) -> int:
    """The turns `auth.password_hashes_at_once` asks for: "auto" is half the cores this process
    may run on, at least one, so that a flood of logins leaves the other half to everyone else."""
    if setting != "auto":
        return setting
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    return max(1, cores // 2)


class PasswordHasher:
    """The process's password hashing: at most `at_once` turns at a time, each running its hashes
    one at a time in a thread of its own limiter, never the default thread limiter that DNS and
    other work share. There is no queue: a turn asked for while all are taken is refused at once
    (`ServiceBusy`), so a flood of logins holds at most `at_once` hashes' memory and cores."""

    def __init__(self, at_once: int) -> None:
        self.turns = trio.CapacityLimiter(at_once)

    @contextmanager
    def turn(self) -> Iterator[PasswordTurn]:
        """One turn at hashing for the block; `ServiceBusy` (503, retry after
        `BUSY_RETRY_AFTER_S`) when every turn is taken, before anything is hashed."""
        holder = object()
        try:
            self.turns.acquire_on_behalf_of_nowait(holder)
        except trio.WouldBlock:
            raise ServiceBusy(
                f"every password hashing turn of this server is taken: retry after {BUSY_RETRY_AFTER_S} s",
                retry_after=BUSY_RETRY_AFTER_S,
            ) from None
        try:
            yield PasswordTurn(trio.CapacityLimiter(1))
        finally:
            self.turns.release_on_behalf_of(holder)


@dataclass(frozen=True)
class PasswordTurn:
    """A turn at hashing (`PasswordHasher.turn`): its hashes run one at a time, in a thread of
    `thread`, its own limiter of one."""

    thread: trio.CapacityLimiter

    async def hash(self, password: str) -> str:
        """The argon2id hash of `password`, with a new salt."""
        return str(await trio.to_thread.run_sync(_hasher.hash, password, limiter=self.thread))

    async def verify(self, password: str, stored_hash: str | None) -> bool:
        """Whether `password` matches `stored_hash`; with no hash, spend the same time and say no."""
        candidate = stored_hash
        if candidate is None:
            candidate = await trio.to_thread.run_sync(_dummy_hash, limiter=self.thread)
        matches = bool(
            await trio.to_thread.run_sync(_hasher.verify, password, candidate, limiter=self.thread)
        )
        return matches and stored_hash is not None


@cache
def _dummy_hash() -> str:
    """Verified when the e-mail is unknown, so a login takes as long whether or not the account
    exists. Made at the first such login (in its thread), not when the module is imported: every
    command of the CLI imports this module, and most never verify a password."""
    return str(_hasher.hash("payorch-no-such-account-password"))
