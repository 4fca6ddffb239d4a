"""The worker processes that decide routing backtests (docs/routing.md, "Backtest"), and the turns
at them, handed out in the order they were asked for.

Deciding 100,000 sessions takes seconds of CPU. In a thread of the server it would hold Python's
interpreter lock away from the threads that serve everyone else's requests, so a backtest is
decided in a process of its own (`engine.routing.backtest_worker`), at a lower priority than the server
(`NICENESS`: the system gives its CPU to serving first). The worker reads the sessions too, over a
database connection of its own: reading and converting 100,000 rows on the server's database thread
would hold that thread, which every request shares, and the interpreter lock. The server's share of a
backtest is a few messages: the run's plain inputs, and what the catalogue's providers take of each
kind of session the worker meets.

`BacktestProcesses.run` (started by the runtime with `nursery.start`) holds the processes:
`PROCESSES` of them at most, each started at its first use (a server that never backtests starts
none; each costs about a third of a second of CPU to start, and its memory) and kept for the next.
`worker()` waits for a turn at one (`turns`: first asked, first served, whoever asks) and hands it
over for one backtest. A worker whose backtest did not end cleanly (the request cancelled: its
client gone, the service stopping; an error) is killed, and a new one started at the next turn;
one that died (`BacktestWorkerLost`, 503) is replaced the same way. When `run` is cancelled, every
worker process is killed and waited for: none outlives the service. A server killed outright
closes the workers' input, and each ends at its next message (its answer, or its next question).
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from payorch.engine.routing.backtest import AmountLimits
from payorch.engine.routing.backtest_worker import (
    HEADER,
    START,
    Failed,
    Limits,
    Message,
    NeedLimits,
    Ran,
    Run,
    framed,
)
from payorch.values.errors import ServiceBusy

log = logging.getLogger("payorch.backtests")

PROCESSES = 1  # worker processes of one server process: backtests decided at once
NICENESS = 10  # how much lower the workers' priority is than the server's (19 at most)
LOST_RETRY_AFTER_S = 5  # when to retry a backtest whose worker process died
STARTUP_TIMEOUT_S = 30.0  # for a worker process to start and announce itself


class BacktestWorkerLost(ServiceBusy):
    """The worker process deciding this backtest died or could not be started (503)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}: retry after {LOST_RETRY_AFTER_S} s", retry_after=LOST_RETRY_AFTER_S)


class BacktestDatabaseUnavailable(ServiceBusy):
    """The worker process could not read the sessions: the database was unavailable or too slow (503)."""

    def __init__(self) -> None:
        super().__init__(
            f"the database could not be read for the backtest: retry after {LOST_RETRY_AFTER_S} s",
            retry_after=LOST_RETRY_AFTER_S,
        )


class BacktestFailed(RuntimeError):
    """The worker process could not decide the backtest (a fault of payorch's: 500); the message
    holds its traceback."""


class BacktestWorker:
    """One worker process, for the backtest that holds its turn: `begin`, `decide` each batch,
    `finish`."""

    def __init__(
        self, process: trio.Process, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream
    ) -> None:
        self.process = process
        self.pid = process.pid
        self._send = send
        self._receive = receive
        self._buffer = bytearray()

    async def backtest(
        self, run: Run, limits_of: Callable[[frozenset[tuple[str, str]]], AmountLimits]
    ) -> Ran:
        """Have the worker read and decide the sessions of `run`, answering each of its questions
        with `limits_of` the kinds of session it asks of."""
        answer = await self.ask(run)
        while isinstance(answer, NeedLimits):
            answer = await self.ask(Limits(limits_of(answer.kinds)))
        if not isinstance(answer, Ran):
            raise BacktestFailed(f"the backtest's worker process answered {type(answer).__name__}")
        return answer

    async def announced_pid(self) -> int:
        """The process id the worker announces once it is ready."""
        pid = await self._next_answer()
        assert isinstance(pid, int)
        return pid

    async def ask(self, message: Message) -> object:
        """Send `message`, and answer the worker's answer (`BacktestFailed` when it failed)."""
        try:
            await self._send.send_all(framed(message))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise self._lost() from None
        answer = await self._next_answer()
        if isinstance(answer, Failed):
            if answer.unavailable:
                log.warning("a routing backtest could not read the database:\n%s", answer.description)
                raise BacktestDatabaseUnavailable()
            raise BacktestFailed(f"the backtest's worker process failed:\n{answer.description}")
        return answer

    async def _next_answer(self) -> object:
        header = await self._exactly(HEADER.size)
        (size,) = HEADER.unpack(header)
        payload = await self._exactly(size)
        return _unpickle(payload)

    async def _exactly(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            try:
                chunk = await self._receive.receive_some(max(size - len(buffer), 65536))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                chunk = b""
            if not chunk:
                raise self._lost()
            buffer += chunk
        found = bytes(buffer[:size])
        del buffer[:size]
        return found

    def _lost(self) -> BacktestWorkerLost:
        log.warning(
            "a routing backtest's worker process is gone",
            extra={"pid": self.pid, "returncode": self.process.returncode},
        )
        return BacktestWorkerLost("the routing backtest's worker process stopped")

    def kill(self) -> None:
        """End the process now (a no-op once it has ended)."""
        if self.process.returncode is None:
            self.process.kill()


def _unpickle(payload: bytes) -> object:
    return pickle.loads(payload)  # noqa: S301 - our own worker process's answer, over our own pipe


class BacktestProcesses:
    """At most `processes` worker processes deciding backtests, one backtest each at a time, at
    `niceness` below the server's priority. `turns` hands out the processes in the order they were
    asked for (`trio.CapacityLimiter` wakes its waiters first come, first served)."""

    def __init__(self, processes: int = PROCESSES, *, niceness: int = NICENESS) -> None:
        self.turns = trio.CapacityLimiter(processes)
        self._niceness = niceness
        self._idle: list[BacktestWorker] = []
        self._alive: dict[int, BacktestWorker] = {}
        self._busy: set[int] = set()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the worker processes until cancelled, then kill each and wait for it. Ready at
        once: the processes start at their first use."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    @asynccontextmanager
    async def worker(self) -> AsyncIterator[BacktestWorker]:
        """Wait for a turn (in the order asked), then hold a worker process for the block: an idle
        one, or one started for it. `BacktestWorkerLost` (503) when none can be started. A block
        that ends by an exception (a cancellation too) kills its worker: what it was deciding is
        unknown, so it is not used again."""
        async with self.turns:
            worker = await self._take()
            self._busy.add(worker.pid)
            try:
                yield worker
            except BaseException:
                worker.kill()
                raise
            finally:
                self._busy.discard(worker.pid)
            if worker.process.returncode is None:
                self._idle.append(worker)

    async def _take(self) -> BacktestWorker:
        while self._idle:
            worker = self._idle.pop()
            if worker.process.returncode is None:  # polls: a process killed while idle is seen
                return worker
        nursery = self._nursery
        if nursery is None:
            raise BacktestWorkerLost("routing backtests are not running: the service is stopping")
        try:
            started: BacktestWorker = await nursery.start(self._hold_process)
        except (OSError, trio.TooSlowError) as error:
            log.error("a routing backtest worker process could not be started: %r", error)
            raise BacktestWorkerLost("no routing backtest worker process could be started") from None
        return started

    async def _hold_process(self, *, task_status: trio.TaskStatus[BacktestWorker]) -> None:
        """Run one worker process until it ends, or until the pool stops (then it is killed); either
        way it is waited for and its pipes closed. Ready once the process announced itself."""
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", START], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            worker = BacktestWorker(process, process.stdin, process.stdout)
            self._lower_priority(process.pid)
            with trio.fail_after(STARTUP_TIMEOUT_S):
                pid = await worker.announced_pid()
            if pid != process.pid:
                raise BacktestWorkerLost(f"the worker process {process.pid} announced itself as {pid}")
            self._alive[pid] = worker
            task_status.started(worker)
            await process.wait()
        finally:
            self._alive.pop(process.pid, None)
            self._idle = [idle for idle in self._idle if idle.process is not process]
            if process.returncode is None:
                process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
                for stream in (process.stdin, process.stdout):
                    if stream is not None:
                        await stream.aclose()

    def _lower_priority(self, pid: int) -> None:
        """Give the process `pid` `niceness` less priority than this one (the system's least at
        most), and on Linux the idle scheduling class (`SCHED_IDLE`: it runs only on a core no
        other process wants, and yields it at once when one does): done at once after its start,
        before it imports anything."""
        try:
            own = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, pid, min(19, own + self._niceness))
            if hasattr(os, "SCHED_IDLE"):
                os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        except PermissionError as error:  # a sandbox that forbids it: the worker runs, at our priority
            log.warning("a routing backtest worker process keeps the server's priority: %s", error)
