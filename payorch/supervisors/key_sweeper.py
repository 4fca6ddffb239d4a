"""Idempotency keys are kept `idempotency.retention_s`; this supervisor deletes them afterwards."""

from __future__ import annotations

import trio

from payorch.restarts import supervised
from payorch.storage.idempotency_keys import delete_expired_idempotency_keys
from payorch.supervisors.context import Background

SWEEP_EVERY_S = 60.0


async def delete_expired_keys(services: Background) -> int:
    """Delete every key past its retention now; returns how many."""
    deleted = 0
    while True:
        batch = await services.db.transaction(delete_expired_idempotency_keys, services.clock.now())
        deleted += batch
        if batch == 0:
            return deleted


async def _sweep_loop(services: Background) -> None:
    while True:
        await delete_expired_keys(services)
        await trio.sleep(SWEEP_EVERY_S)


async def run_idempotency_supervisor(
    services: Background, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    await supervised(services.supervisors, "idempotency key expiry", _sweep_loop, services)
