"""Session expiry: a PENDING session past `expiresAt` becomes FAILED with failureReason EXPIRED,
once its provider has closed the checkout (`engine.payments.expiry`).

The supervisor hands due sessions to their applications' actors in slots (`supervisors.slots`):
`limits.background_slots` at once, at most `limits.background_per_merchant` of one merchant's, each
in a task of its own, so a provider that hangs holds only its merchant's share of the slots until
its timeout, and a merchant whose actor is busy has its sessions expire a little later, alone. It
looks for work as soon as a slot frees, else sleeps until the earliest expiry (at most
`MAX_SLEEP_S`, so sessions created meanwhile are not missed); a look reads the due sessions and the
earliest expiry in one unit. Nothing is kept in memory but what is
in flight and what waits after a failure: after a restart the database says what is due.
"""

from __future__ import annotations

import logging

import trio

from payorch.engine.commands import PaymentActors
from payorch.engine.context import Context
from payorch.engine.payments.expiry import ExpireSession
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage import due_work, sessions
from payorch.supervisors.slots import DueWork

log = logging.getLogger("payorch.supervisors.expiry_loop")

MAX_SLEEP_S = 1.0


class _NextExpiry:
    """When the earliest PENDING session expires, as the loop's last look saw it: seconds from then
    (<= 0 when one was due), None when none was pending."""

    in_s: float | None = None


def _expiry(context: Context, actors: PaymentActors, next_expiry: _NextExpiry) -> DueWork:
    async def pick(limit: int, skips: due_work.Skips) -> list[due_work.DueItem]:
        due, next_expiry.in_s = await context.db.autocommit(
            sessions.sessions_due_for_expiry_and_next,
            limit,
            per_merchant=context.settings.limits.background_per_merchant,
            skips=skips,
            now=context.clock.now(),
        )
        return due

    async def expire(item: due_work.DueItem) -> bool:
        return await actors.ask(item.application_id, ExpireSession(item.id))

    return DueWork("session expiry", context, pick=pick, handle=expire)


async def _expiry_loop(
    context: Context, actors: PaymentActors, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    next_expiry = _NextExpiry()
    expiry = _expiry(context, actors, next_expiry)
    ready = False
    async with trio.open_nursery() as nursery:
        while True:
            started = await expiry.round(nursery)
            if not ready:
                task_status.started()
                ready = True
            if started and not expiry.slots.free:
                await expiry.slots.wait_for_wake(MAX_SLEEP_S)  # more may be due: at the next free slot
                continue
            wait = next_expiry.in_s  # read by the round's own look
            # Due now yet not started: in flight, over its merchant's share or waiting after a
            # failure; a freed slot rings.
            sleep_s = MAX_SLEEP_S if wait is None or wait <= 0 else min(max(wait, 0.01), MAX_SLEEP_S)
            await expiry.slots.wait_for_wake(sleep_s)


async def run_expiry_supervisor(
    context: Context,
    actors: PaymentActors,
    board: SupervisorBoard,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Expire due sessions until cancelled, restarted when it fails. Started once its first round has
    handed what was due as it started (sessions that expired while no process ran) to their
    actors, in its slots."""
    await supervised(board, "session expiry", _expiry_loop, context, actors, task_status=task_status)
