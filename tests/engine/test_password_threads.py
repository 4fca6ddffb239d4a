"""Password hashes run on the hasher's own threads at the least priority (nice 19), never on Trio's
cached threads that other work reuses: a stranger's login flood then takes only the CPU the serving
threads leave. A hash's result, or its exception, reaches the caller as from any call."""

from __future__ import annotations

import os
import threading

import pytest
import trio

from payorch.engine.accounts.passwords import HASHING_NICENESS, PasswordHasher


def _niceness_and_thread() -> tuple[int, int]:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), threading.get_ident()


async def test_hashes_run_on_the_hashers_own_threads_at_the_least_priority() -> None:
    hasher = PasswordHasher(1)
    niceness, thread = await hasher.threads.run(_niceness_and_thread)
    assert niceness == HASHING_NICENESS
    # Trio's own worker threads keep their priority: they run other work after a hash.
    trio_niceness, trio_thread = await trio.to_thread.run_sync(_niceness_and_thread)
    assert trio_thread != thread
    assert trio_niceness == os.getpriority(os.PRIO_PROCESS, 0)


async def test_a_hash_and_its_verification_round_trip_on_the_hashing_threads() -> None:
    with PasswordHasher(1).turn() as turn:
        stored = await turn.hash("correct-horse-battery")
        assert await turn.verify("correct-horse-battery", stored)
        assert not await turn.verify("wrong-horse-battery!", stored)
        assert not await turn.verify("correct-horse-battery", None)  # an unknown account: never


async def test_an_exception_in_a_hashing_thread_is_raised_to_the_caller() -> None:
    def fails() -> None:
        raise ValueError("not a hash")

    with pytest.raises(ValueError, match="not a hash"):
        await PasswordHasher(1).threads.run(fails)
