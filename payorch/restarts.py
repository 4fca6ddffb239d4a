"""Restarts (supervision): a long-running loop that fails is logged and restarted after a pause that grows.

A `SupervisorBoard` records which supervised loops are running, for `/readyz`.
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
    """Which supervised loops are running right now (False while one waits to restart)."""

    def __init__(self) -> None:
        self.running: dict[str, bool] = {}
        self.restarts: dict[str, int] = {}

    def all_running(self) -> bool:
        return all(self.running.values())


async def supervised(
    board: SupervisorBoard, name: str, loop: Callable[..., Awaitable[None]], *args: Any
) -> None:
    """Run `loop(*args)` forever: a crash is logged, followed by a growing pause and a restart.
    Cancellation (shutdown) ends it."""
    backoff = INITIAL_BACKOFF_S
    board.restarts.setdefault(name, 0)
    while True:
        started = trio.current_time()
        board.running[name] = True
        try:
            await loop(*args)
        except Exception:
            log.exception("supervisor crashed; restarting", extra={"supervisor": name, "restartInS": backoff})
        except BaseExceptionGroup as group:
            # A crash and the shutdown's cancellation at once (a nursery in the loop gathered both):
            # the crash is logged, the cancellation goes on, so shutdown is not mistaken for a crash.
            cancelled, crashed = group.split(trio.Cancelled)
            if crashed is not None:
                log.error("supervisor crashed while stopping", exc_info=crashed, extra={"supervisor": name})
            if cancelled is not None:
                raise cancelled from None
            raise
        board.running[name] = False
        board.restarts[name] += 1
        if trio.current_time() - started > MAX_BACKOFF_S:
            backoff = INITIAL_BACKOFF_S  # it ran fine for a while: a fresh failure starts small again
        await trio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
