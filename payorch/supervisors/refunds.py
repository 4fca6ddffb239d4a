"""Refund submission: refunds the provider has not acknowledged are submitted again, with a growing
pause (`refunds.retry_max_delay_s` at most), until it does, also after a restart: what is due
lives in the database."""

from __future__ import annotations

import trio

from payorch.engine.refund_commands import SubmitRefund
from payorch.storage import refunds
from payorch.supervision import supervised
from payorch.supervisors.context import Background

POLL_S = 0.5
BATCH = 50


async def submit_due_refunds(services: Background) -> int:
    """Submit every refund due now; returns how many the provider acknowledged."""
    lease_s = services.settings.refunds.submit_timeout_s * 2 + 30
    due = await services.db.transaction(
        refunds.claim_due_submissions, BATCH, lease_s, services.node.id, now=services.clock.now()
    )
    acknowledged = 0
    unfinished = {item.refund_id for item in due}
    try:
        async with trio.open_nursery() as submitting:

            async def submit(item: refunds.DueSubmission) -> None:
                nonlocal acknowledged
                if await services.actors.ask(item.application_id, SubmitRefund(item.refund_id)):
                    acknowledged += 1
                unfinished.discard(item.refund_id)

            for item in due:
                submitting.start_soon(submit, item)
    finally:
        if unfinished:
            # Shutting down: hand the claims back so another process need not wait out the lease.
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await services.db.transaction(
                    refunds.release_submission_claims, list(unfinished), now=services.clock.now()
                )
    return acknowledged


async def _refund_loop(services: Background) -> None:
    while True:
        await submit_due_refunds(services)
        await trio.sleep(POLL_S)


async def run_refund_supervisor(
    services: Background, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    await supervised(services.supervisors, "refund submission", _refund_loop, services)
