"""Idempotency keys are kept `idempotency.retention_s`; this supervisor deletes them afterwards."""

from __future__ import annotations

import trio

from payorch.engine.context import Context
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage.idempotency_keys import delete_expired_idempotency_keys

SWEEP_EVERY_S = 60.0


async def delete_expired_keys(context: Context) -> int:
    """Delete every key past its retention now; returns how many."""
    deleted = 0
    while True:
        batch = await context.db.transaction(delete_expired_idempotency_keys, context.clock.now())
        deleted += batch
        if batch == 0:
            return deleted


async def _sweep_loop(
    context: Context, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    await context.db.transaction(delete_expired_idempotency_keys, context.clock.now())
    task_status.started()
    while True:
        await delete_expired_keys(context)
        await trio.sleep(SWEEP_EVERY_S)


async def run_idempotency_supervisor(
    context: Context, board: SupervisorBoard, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Delete the keys past their retention now and every `SWEEP_EVERY_S`, restarted when it fails.
    Started once the first batch is deleted: its statement works. The rest of a backlog that a long
    stop left is deleted while the service serves, not before."""
    await supervised(board, "idempotency key expiry", _sweep_loop, context, task_status=task_status)
