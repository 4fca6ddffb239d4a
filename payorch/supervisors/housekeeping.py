"""What the service remembers between requests and no longer needs, dropped while it is idle.

Remembered API keys past `auth.api_key_cache_s` and rate-limit leases with nothing left in them are
dropped as requests come; with no requests they would stay. This loop drops them every few seconds,
so a service that served many merchants and then went quiet gives that memory back (the application
actors stop by themselves after `engine.actor_idle_s`).

The shared rate-limit buckets (`storage.rate_buckets`) are rows in the database, one per key used
lately: a bucket full again is what a key without a row gets, so every process deletes the full ones
every `BUCKET_SWEEP_S`. The table then holds the keys used within their bucket's refill time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

from payorch.storage import rate_buckets
from payorch.storage.database import Database

SWEEP_EVERY_S = 5.0
BUCKET_SWEEP_S = 30.0


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


async def delete_full_buckets(
    db: Database, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Delete the shared rate-limit buckets that are full again every `BUCKET_SWEEP_S`, until
    cancelled. Started at once: nothing is full yet that a sweep must have deleted."""
    task_status.started()
    while True:
        await trio.sleep(BUCKET_SWEEP_S)
        await db.autocommit(rate_buckets.delete_full)
