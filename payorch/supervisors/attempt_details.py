"""The details of webhook delivery attempts (the headers sent, the receiver's headers and the first
bytes of its body) are kept `webhooks.attempt_details_retention_days`; this supervisor removes them
afterwards, in batches of `BATCH` attempts, one short transaction each, every `SWEEP_EVERY_S`. An
attempt's time, status, error and latency stay, as does the event's body (the event's own, not the
attempt's). With several processes, each takes the batches the others are not removing.
"""

from __future__ import annotations

from datetime import timedelta

import trio

from payorch.engine.context import Context
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage.delivery_details import remove_expired_details

SWEEP_EVERY_S = 60.0
BATCH = 1000


async def remove_expired_attempt_details(context: Context) -> int:
    """Remove the details of every attempt past the retention now, batch by batch; returns how many
    attempts lost theirs. The retention is read at each call: a reload applies from the next."""
    now = context.clock.now()
    before = now - timedelta(days=context.settings.webhooks.attempt_details_retention_days)
    removed = 0
    while True:
        batch = await context.db.transaction(remove_expired_details, before=before, limit=BATCH, now=now)
        removed += batch
        if batch < BATCH:
            return removed


async def _sweep_loop(
    context: Context, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    while True:
        await remove_expired_attempt_details(context)
        await trio.sleep(SWEEP_EVERY_S)


async def run_attempt_details_pruning(
    context: Context, board: SupervisorBoard, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Remove the attempt details past their retention now and every `SWEEP_EVERY_S`, restarted when
    it fails. Started at once: a backlog that a long stop left is removed while the service serves."""
    await supervised(board, "attempt details pruning", _sweep_loop, context, task_status=task_status)
