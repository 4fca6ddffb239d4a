"""The asyncio event loop asyncpg runs on, in a thread of its own, and the one way Trio code runs a
coroutine there (docs/bridge.md).

Everything payorch asks of PostgreSQL crosses here: the pool's units of work (`storage.database`) and
the dedicated connections' statements (`storage.dedicated`: the node lock, LISTEN). Each crossing is
a hand-off to the loop and one back, each queued in order (`_HandOffs`): only a hand-off that
finds its queue empty wakes the other side (`call_soon_threadsafe`, `TrioToken.run_sync_soon`), and
that wake-up runs every hand-off queued until then. Units that start or end at the same moment
cross in one wake-up: under load, far fewer system calls, each of which gives up the interpreter
lock to the other thread (docs/bridge.md).

The loop is meant to run for as long as `loop_thread`'s block does. Should it stop before that (an
exception escaped it, or something stopped it), every caller waiting on it fails at once with
`DatabaseLoopStopped`, and so does every later call: an asyncpg `InterfaceError`, the database being
unavailable (`storage.failures`), so the requests waiting on it are answered 503 and the readiness
probe's database check fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import asyncpg
import outcome
import trio

T = TypeVar("T")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

log = logging.getLogger("payorch.storage")

THREAD_NAME = "payorch database loop"


class DatabaseLoopStopped(asyncpg.InterfaceError):  # type: ignore[misc]  # asyncpg is untyped
    """The event loop of the database's thread does not run (any more): nothing can reach PostgreSQL
    until the process restarts. Also what a closed `Database` raises."""


class LoopBoundConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg is untyped
    """An asyncpg connection whose finalisation runs on its event loop's thread, as every other use
    of it does. asyncpg's own `__del__` terminates a connection left open (one whose loop stopped
    under it) in whatever thread the garbage collector runs: a Trio thread aborting a uvloop
    transport while that loop still runs its last tasks crashes the process. The pool's connections
    and the dedicated ones are made of this class."""

    def __del__(self) -> None:
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or loop.is_closed():
            super().__del__()
            return
        # On the loop's thread: the connection lives until then (finalised once only, PEP 442).
        with contextlib.suppress(RuntimeError):  # closed meanwhile: nothing is left to terminate
            loop.call_soon_threadsafe(super().__del__)


def _raise_loop_stopped() -> None:
    raise DatabaseLoopStopped("the database is closed: its event loop does not run")


class _HandOffs:
    """Callbacks handed to another thread, run there in the order handed: only a hand-off that finds
    none waiting wakes that thread (`wake`: `call_soon_threadsafe`, `TrioToken.run_sync_soon`), and
    that wake-up runs every callback handed over until then. A callback that raises (its thread's
    loop reports it) leaves the rest to a wake-up of their own."""

    def __init__(self, wake: Callable[[Callable[[], None]], object]) -> None:
        self._wake = wake
        self._queue: deque[Callable[[], None]] = deque()

    def hand(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the other thread. RuntimeError when that thread's loop is closed (or
        its run finished): nothing handed over runs any more then."""
        queue = self._queue
        queue.append(callback)
        if len(queue) == 1:  # else a wake-up is on its way, and runs this one too
            try:
                self._wake(self._drain)
            except RuntimeError:
                queue.clear()
                raise

    def _drain(self) -> None:  # on the other thread
        queue = self._queue
        try:
            while queue:
                queue.popleft()()
        finally:
            if queue:
                self._wake(self._drain)


class LoopThread:
    """An asyncio event loop running in a thread of its own, seen from Trio."""

    def __init__(self, loop: asyncio.AbstractEventLoop, token: trio.lowlevel.TrioToken) -> None:
        self._loop = loop
        self.token = token
        self.stopping = False  # set (in the Trio thread) once the loop stops or is about to
        self.stopped = trio.Event()  # set once the loop no longer runs, however it ended
        # The callers parked on a task of the loop, each with how to fail it if the loop stops.
        self._waiting: dict[trio.lowlevel.Task, Callable[[], None]] = {}
        self._on_stop: set[Callable[[], None]] = set()
        # Crossings each way, queued: the units that start or end together cross in one wake-up.
        self._to_loop = _HandOffs(loop.call_soon_threadsafe)
        self._to_trio = _HandOffs(token.run_sync_soon)

    def call_on_stop(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` (in the Trio thread) when the loop stops; the function returned forgets it."""
        self._on_stop.add(callback)
        return lambda: self._on_stop.discard(callback)

    async def run(self, make_coroutine: Callable[[], Awaitable[T]]) -> T:
        """What `make_coroutine()` returns or raises, run as an asyncio task on the loop (in that
        thread's context: the caller's context variables are not seen there). A cancelled caller
        cancels the task and waits for it to end, then raises `trio.Cancelled`; if the task ended
        before the cancellation reached it, its own outcome is delivered instead. Once the loop is
        stopping, or as soon as it stops while the task runs, this raises `DatabaseLoopStopped` (the
        caller's own cancellation, if one had reached it)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.stopping:
            _raise_loop_stopped()
        loop, waiting, hand_to_trio = self._loop, self._waiting, self._to_trio.hand
        caller = trio.lowlevel.current_task()
        task: asyncio.Task[T] | None = None
        raise_cancel: Callable[[], Any] | None = None

        def settle(result: outcome.Outcome[T]) -> None:  # in the Trio thread, once per call
            if waiting.pop(caller, None) is not None:
                trio.lowlevel.reschedule(caller, result)

        def fail() -> None:  # in the Trio thread, when the loop stops first
            failure: Callable[[], Any] = raise_cancel or _raise_loop_stopped
            settle(outcome.capture(failure))

        def wake_caller(ended: asyncio.Task[T]) -> None:  # in the Trio thread
            if ended.cancelled():
                fail()  # by its caller, or by the loop as it shut down
            elif (error := ended.exception()) is not None:
                settle(outcome.Error(error))
            else:
                settle(outcome.Value(ended.result()))

        def start() -> None:  # in the loop's thread
            nonlocal task
            task = loop.create_task(_awaited(make_coroutine))
            task.add_done_callback(lambda ended: hand_to_trio(partial(wake_caller, ended)))

        def cancel() -> None:  # in the loop's thread, always after start(): the loop keeps their order
            assert task is not None
            task.cancel()

        def abort(raise_cancel_in_trio: Callable[[], Any]) -> trio.lowlevel.Abort:
            nonlocal raise_cancel
            raise_cancel = raise_cancel_in_trio
            # A closed loop refuses: its stop, on its way to this thread, fails the caller.
            with contextlib.suppress(RuntimeError):
                self._to_loop.hand(cancel)
            return trio.lowlevel.Abort.FAILED  # the caller is woken when the task has ended

        waiting[caller] = fail
        try:
            self._to_loop.hand(start)
        except RuntimeError:  # closed: it stopped, and this thread has not heard yet
            del waiting[caller]
            _raise_loop_stopped()
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def loop_stopped(self, escaped: BaseException | None) -> None:
        """In the Trio thread, as soon as the loop no longer runs: fail every caller waiting on it,
        and say so when nobody asked it to stop."""
        if self.stopped.is_set():
            return
        if not self.stopping:
            log.error(
                "the database's event loop stopped by itself: every unit of work fails until the "
                "process restarts",
                exc_info=escaped,
            )
        self.stopping = True
        self.stopped.set()
        for fail in list(self._waiting.values()):
            fail()
        for callback in list(self._on_stop):
            callback()


async def _awaited(make_coroutine: Callable[[], Awaitable[T]]) -> T:
    return await make_coroutine()


def run_until_stopped(
    loop: asyncio.AbstractEventLoop, stopped: Callable[[BaseException | None], None]
) -> None:
    """Run `loop` until it stops, and call `stopped` at once (before anything left on the loop is
    finished, which may take a while); then, as `asyncio.run` does, cancel and finish what is left
    on it, and close it."""
    try:
        try:
            loop.run_forever()
        except BaseException as escaped:
            stopped(escaped)
            raise
        stopped(None)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def default_loop_factory() -> LoopFactory:
    """uvloop's event loop where uvloop is installed (it costs less CPU per unit of work), asyncio's
    own otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.SelectorEventLoop
    loop_class: LoopFactory = uvloop.Loop
    return loop_class


@asynccontextmanager
async def loop_thread(loop_factory: LoopFactory) -> AsyncIterator[LoopThread]:
    """A new event loop running in a new thread for as long as the block runs; on exit (shielded)
    the loop is stopped and closed, and the thread has ended. An exception that escaped the loop is
    raised here then."""
    loop = loop_factory()
    token = trio.lowlevel.current_trio_token()
    thread_ended = trio.Event()
    how_it_ended: list[outcome.Outcome[None]] = []
    running = LoopThread(loop, token)

    ran_out = False  # read and written in the loop's thread only

    def stopped(escaped: BaseException | None) -> None:  # in the loop's thread, once it ran out
        nonlocal ran_out
        ran_out = True
        token.run_sync_soon(running.loop_stopped, escaped)

    def stop() -> None:  # in the loop's thread; not once it ran out: what it finishes must finish
        if not ran_out:
            loop.stop()

    def deliver(result: outcome.Outcome[None]) -> None:  # in the loop's thread, as it ends
        how_it_ended.append(result)
        token.run_sync_soon(thread_ended.set)

    trio.lowlevel.start_thread_soon(lambda: run_until_stopped(loop, stopped), deliver, name=THREAD_NAME)
    try:
        yield running
    finally:
        running.stopping = True
        with contextlib.suppress(RuntimeError):  # closed already: it stopped before its time
            loop.call_soon_threadsafe(stop)
        with trio.CancelScope(shield=True):
            await thread_ended.wait()
        how_it_ended[0].unwrap()
