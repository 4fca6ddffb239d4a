"""Session expiry: a PENDING session past `expiresAt` becomes FAILED with failureReason EXPIRED,
once its provider has closed the checkout (`engine.expiry`).

The supervisor sleeps until the earliest expiry (at most `MAX_SLEEP_S`, so sessions created
meanwhile are not missed), hands the due sessions to their applications' actors, `CONCURRENCY` at
a time (each may wait on its provider), and restarts after a failure. Nothing is kept in memory:
after a restart the database says what is due.
"""

from __future__ import annotations

import logging

import trio

from payorch.engine.expiry import ExpireSession
from payorch.storage import sessions
from payorch.supervision import supervised
from payorch.supervisors.context import Background

log = logging.getLogger("payorch.supervisors.expiry")

MAX_SLEEP_S = 0.5
BATCH = 200
CONCURRENCY = 32


async def expire_due_sessions(services: Background) -> int:
    """Expire every session due now; returns how many changed."""
    expired = 0
    limiter = trio.CapacityLimiter(CONCURRENCY)

    async def expire(item: sessions.DueExpiry) -> None:
        nonlocal expired
        async with limiter:
            if await services.actors.ask(item.application_id, ExpireSession(item.session_id)):
                expired += 1

    while True:
        due = await services.db.read(sessions.sessions_due_for_expiry, BATCH, now=services.clock.now())
        async with trio.open_nursery() as expiring:
            for item in due:
                expiring.start_soon(expire, item)
        if len(due) < BATCH:
            return expired


async def _expiry_loop(services: Background) -> None:
    while True:
        await expire_due_sessions(services)
        wait = await services.db.read(sessions.seconds_until_next_expiry, now=services.clock.now())
        await trio.sleep(MAX_SLEEP_S if wait is None else min(max(wait, 0.01), MAX_SLEEP_S))


async def run_expiry_supervisor(
    services: Background, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    await supervised(services.supervisors, "session expiry", _expiry_loop, services)
