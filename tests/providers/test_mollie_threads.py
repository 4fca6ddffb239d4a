"""The SDK's worker threads: one account's calls wait on its own share, never on the others'."""

from __future__ import annotations

import threading
from functools import partial

import trio

from payorch.providers.mollie.threads import AccountThreads
from tests.helpers import eventually


async def test_an_account_using_its_whole_share_leaves_the_other_accounts_their_threads() -> None:
    threads = AccountThreads(total=4, per_account=1)
    release = threading.Event()
    async with trio.open_nursery() as nursery:
        # Account A's call hangs in its thread (as a slow Mollie answer would); A's next call waits.
        nursery.start_soon(partial(trio.to_thread.run_sync, release.wait, limiter=threads.limiter("test_a")))  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
        assert threads.whole.borrowed_tokens == 1
        with trio.move_on_after(0) as a_again:
            await trio.to_thread.run_sync(lambda: None, limiter=threads.limiter("test_a"))  # type: ignore[arg-type]
        assert a_again.cancelled_caught
        # Account B runs at once.
        assert await trio.to_thread.run_sync(lambda: "b", limiter=threads.limiter("test_b")) == "b"  # type: ignore[arg-type]
        release.set()
    assert threads.whole.borrowed_tokens == 0
    assert threads.accounts() == 0  # every share is forgotten once its calls are done


async def test_a_thread_abandoned_by_its_caller_keeps_its_places_until_it_ends() -> None:
    threads = AccountThreads(total=2, per_account=1)
    running, release = threading.Event(), threading.Event()

    def hanging_call() -> None:
        running.set()
        release.wait()

    # The caller gives up once its thread runs (not after a time, which a busy machine may let pass
    # before the thread starts: that is the case of the test below).
    with trio.CancelScope() as caller:

        async def give_up_once_running() -> None:
            await trio.to_thread.run_sync(running.wait)
            caller.cancel()

        limiter = threads.limiter("test_a")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(give_up_once_running)
            await trio.to_thread.run_sync(hanging_call, abandon_on_cancel=True, limiter=limiter)  # type: ignore[arg-type]
    assert caller.cancelled_caught
    assert (threads.whole.borrowed_tokens, threads.accounts()) == (1, 1)
    release.set()

    async def thread_ended() -> bool:  # the thread's end is reported to trio
        return threads.whole.borrowed_tokens == 0

    await eventually(thread_ended, 5)
    assert threads.accounts() == 0


async def test_a_call_cancelled_before_its_thread_starts_leaves_no_share_behind() -> None:
    threads = AccountThreads(total=2, per_account=1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await trio.to_thread.run_sync(lambda: None, limiter=threads.limiter("test_a"))  # type: ignore[arg-type]
    assert (threads.whole.borrowed_tokens, threads.accounts()) == (0, 0)
