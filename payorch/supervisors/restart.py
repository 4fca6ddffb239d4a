"""Supervision: a long-running loop that fails is logged and restarted after a pause that grows."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("payorch.supervisors")

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


async def supervised(name: str, loop: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run `loop(*args)` forever: a crash is logged, followed by a growing pause and a restart.
    Cancellation (shutdown) ends it."""
    backoff = INITIAL_BACKOFF_S
    while True:
        started = trio.current_time()
        try:
            await loop(*args)
        except Exception:
            log.exception("supervisor crashed; restarting", extra={"supervisor": name, "restartInS": backoff})
        if trio.current_time() - started > MAX_BACKOFF_S:
            backoff = INITIAL_BACKOFF_S  # it ran fine for a while: a fresh failure starts small again
        await trio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
