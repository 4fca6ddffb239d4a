"""What the service remembers between requests and no longer needs, dropped while it is idle.

Remembered API keys past `auth.api_key_cache_s` and rate-limit buckets that refilled are dropped
as requests come; with no requests they would stay. This loop drops them every few seconds, so a
service that served many merchants and then went quiet gives that memory back (the application
actors stop by themselves after `engine.actor_idle_s`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

SWEEP_EVERY_S = 5.0


class ForgetsIdle(Protocol):
    """Something that remembers per-caller state and can drop what nobody needs any more."""

    def forget_idle(self) -> None: ...


async def forget_idle_state(
    keepers: Sequence[ForgetsIdle], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Drop what `keepers` no longer need every `SWEEP_EVERY_S`, until cancelled. Started at once: it
    prepares nothing, and nothing is idle yet."""
    task_status.started()
    while True:
        await trio.sleep(SWEEP_EVERY_S)
        for keeper in keepers:
            keeper.forget_idle()
