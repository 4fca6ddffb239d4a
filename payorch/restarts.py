"""Restarts (supervision): a long-running loop that fails is logged and restarted after a pause that grows.

A `SupervisorBoard` records which supervised loops are running right now, for `/readyz`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("payorch.supervisors")

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


class SupervisorBoard:
    """Which supervised loops are running right now: True from the moment a run reports it is ready,
    False before that and while one waits to restart."""

    def __init__(self) -> None:
        self.running: dict[str, bool] = {}
        self.restarts: dict[str, int] = {}

    def all_running(self) -> bool:
        return all(self.running.values())


class _Run(trio.TaskStatus[None]):
    """The task status one run of a supervised loop reports its readiness to: the board, and, for
    the run that is the first to be ready, whoever started the supervisor."""

    def __init__(self, board: SupervisorBoard, name: str, starter: trio.TaskStatus[None] | None) -> None:
        self.ready = False
        self._board = board
        self._name = name
        self._starter = starter

    def started(self, value: None = None) -> None:
        if self.ready:
            raise RuntimeError(f"{self._name}: one run reported it was ready twice")
        self.ready = True
        self._board.running[self._name] = True
        if self._starter is not None:
            self._starter.started()


async def supervised(
    board: SupervisorBoard,
    name: str,
    loop: Callable[..., Awaitable[None]],
    *args: Any,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run `loop(*args, task_status=...)` until cancelled (shutdown): a crash is logged, followed by
    a growing pause and a restart.

    Each run of `loop` calls `task_status.started()` once it is ready to do its work. The first run
    to be ready reports this supervisor started, once: a restarted run only marks the loop running
    again on `board`. A first run that fails before it is ready is not restarted: one log line names
    the loop and its error propagates, so the service fails to start instead of waiting for it."""
    where = {"supervisor": name}
    backoff = INITIAL_BACKOFF_S
    board.restarts.setdefault(name, 0)
    board.running[name] = False
    starter: trio.TaskStatus[None] | None = task_status  # until a run is ready
    while True:
        began = trio.current_time()
        run = _Run(board, name, starter)
        try:
            await loop(*args, task_status=run)
        except Exception:
            if starter is not None and not run.ready:
                log.exception(
                    "supervisor failed before it was ready: the service does not start", extra=where
                )
                raise
            log.exception("supervisor crashed; restarting", extra={**where, "restartInS": backoff})
        except BaseExceptionGroup as group:
            # A crash and the shutdown's cancellation at once (a nursery in the loop gathered both):
            # the crash is logged, the cancellation goes on, so shutdown is not mistaken for a crash.
            cancelled, crashed = group.split(trio.Cancelled)
            if crashed is not None:
                log.error("supervisor crashed while stopping", exc_info=crashed, extra=where)
            if cancelled is not None:
                raise cancelled from None
            raise
        if run.ready:
            starter = None
        board.running[name] = False
        board.restarts[name] += 1
        if trio.current_time() - began > MAX_BACKOFF_S:
            backoff = INITIAL_BACKOFF_S  # it ran fine for a while: a fresh failure starts small again
        await trio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
