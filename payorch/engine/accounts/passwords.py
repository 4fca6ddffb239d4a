"""Admin passwords: argon2id hashes through libpass. Hashing is slow on purpose and takes memory on
purpose, so it runs in threads of its own, at most `PasswordHasher`'s turns at once; a login or
signup that finds every turn taken is answered 503 before any hash starts.

The threads are the hasher's own (`HashingThreads`), never Trio's cached ones, and run at the least
priority (nice 19): a hash is tens of milliseconds of one core, and at the server's priority a
stranger's login flood, bounded to a hash at a time, still took a core away from the threads
serving every merchant whenever the machine had no other free, so the others' creates waited
behind it (their p99 several times what it was alone, on two cores). At nice 19 a hash takes what
the serving threads leave, and a login waits a little longer when the machine is busy. Trio's
cached threads could not be lowered: a thread of its cache runs any later `to_thread` work, and an
unprivileged process cannot raise a thread's priority back.

The parameters are OWASP's (Password Storage Cheat Sheet) argon2id choice m = 7 MiB, t = 5, p = 1,
chosen from a measurement on the service's machine (docs/operations.md, "Password hashing"): about
14 ms of one core a hash, its 7 MiB reused from the hashing thread's heap by the next hash. The
46 MiB of OWASP's first choice is a mapping of its own at every hash (above glibc's mmap
threshold): its pages faulted in and zeroed, then unmapped, on every hash, three times the CPU,
and beside a login flood the other merchants' create p99 was half as much again as with 7 MiB.
Hashes made with other parameters keep verifying (argon2 writes its parameters into each hash),
and a login that verifies one stores the password's hash with today's (`PasswordTurn.rehash`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, Literal

import outcome
import trio
from passlib.hash import argon2

from payorch.values.cpu_share import CpuShare
from payorch.values.errors import ServiceBusy

HASH_MEMORY_KIB = 7168  # 7 MiB
HASH_TIME_COST = 5
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


HASHING_NICENESS = 19  # the hashing threads' priority: the least


def _lower_this_thread() -> None:
    """Give the calling thread the least priority (Linux: a thread's nice value is its own)."""
    # A system without per-thread priorities: the hashes run at the process's.
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HASHING_NICENESS)


class HashingThreads:
    """`count` threads of the hasher's own, at the least priority, started at the first hash and
    ending with the process (daemons, idle between hashes, holding nothing). `run` hands one a
    function and waits for its result; the turns (`PasswordHasher`) keep at most `count` functions
    running at once. Each thread holds its hashes to `cpu_share` of a core (`values.cpu_share`):
    after a hash it rests (`rest`) in proportion to the CPU the hash took, its result already
    delivered, and a turn asked for meanwhile waits for the rest to end: so while a flood keeps
    every turn taken, the logins beyond them are refused (503) and the hashes that do run take at
    most that share."""

    def __init__(
        self, count: int, cpu_share: float = 1.0, rest: Callable[[float], None] = time.sleep
    ) -> None:
        self.count = count
        self.cpu_share = cpu_share
        self._rest = rest
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[outcome.Outcome[Any]], None]]]
        self._jobs = queue.SimpleQueue()
        self._started = 0
        self._starting = threading.Lock()

    def _start(self) -> None:
        with self._starting:
            while self._started < self.count:
                threading.Thread(target=self._serve, name="payorch password hashing", daemon=True).start()
                self._started += 1

    def _serve(self) -> None:
        _lower_this_thread()
        pacing = CpuShare(self.cpu_share, time.thread_time)
        while True:
            work, deliver = self._jobs.get()
            deliver(outcome.capture(work))
            self._rest(pacing.rest_s())

    async def run(self, work: Callable[[], Any]) -> Any:
        """`work()` in one of the threads; its result, or its exception raised here. Not cancelled
        midway, as `trio.to_thread.run_sync` is not: a hash is tens of milliseconds."""
        if self._started < self.count:
            self._start()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        result: list[outcome.Outcome[Any]] = []

        def deliver(finished: outcome.Outcome[Any]) -> None:
            result.append(finished)
            token.run_sync_soon(done.set)

        self._jobs.put((work, deliver))
        with trio.CancelScope(shield=True):
            await done.wait()
        return result[0].unwrap()


class PasswordHasher:
    """The process's password hashing: at most `at_once` turns at a time, each running its hashes
    one at a time on the hasher's own threads at the least priority (`HashingThreads`), never
    Trio's threads that DNS and other work share. There is no queue: a turn asked for while all
    are taken is refused at once (`ServiceBusy`), so a flood of logins holds at most `at_once`
    hashes' memory and cores."""

    def __init__(self, at_once: int, cpu_share: float = 1.0) -> None:
        self.turns = trio.CapacityLimiter(at_once)
        self.threads = HashingThreads(at_once, cpu_share)

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
            yield PasswordTurn(self.threads)
        finally:
            self.turns.release_on_behalf_of(holder)


@dataclass(frozen=True)
class PasswordTurn:
    """A turn at hashing (`PasswordHasher.turn`): its hashes run one after another on the hasher's
    `threads`."""

    threads: HashingThreads

    async def hash(self, password: str) -> str:
        """The argon2id hash of `password`, with a new salt."""
        return str(await self.threads.run(partial(_hasher.hash, password)))

    async def verify(self, password: str, stored_hash: str | None) -> bool:
        """Whether `password` matches `stored_hash`; with no hash, spend the same time and say no."""
        candidate = stored_hash
        if candidate is None:
            candidate = await self.threads.run(_dummy_hash)
        matches = bool(await self.threads.run(partial(_hasher.verify, password, candidate)))
        return matches and stored_hash is not None

    async def rehash(self, password: str, stored_hash: str) -> str | None:
        """For a `password` just verified against `stored_hash`: its hash with today's parameters
        when `stored_hash` was made with others (a new hash, in this turn), None when it was not."""
        if not _hasher.needs_update(stored_hash):
            return None
        return await self.hash(password)


@cache
def _dummy_hash() -> str:
    """Verified when the e-mail is unknown, so a login takes as long whether or not the account
    exists. Made at the first such login (in its thread), not when the module is imported: every
    command of the CLI imports this module, and most never verify a password."""
    return str(_hasher.hash("payorch-no-such-account-password"))
