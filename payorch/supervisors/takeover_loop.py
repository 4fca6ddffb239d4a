"""Claim takeover: once a second, and as this node starts, the claims of nodes that are gone (a
process killed, a machine lost) are released, so their deliveries and refund submissions are due
again within about a second of PostgreSQL seeing the node's connection close, not when their leases
end (`storage.claim_takeover`). A restarted single node thus finishes what its previous run had in
flight as it starts. Every node runs it; two releasing one claim at once release it once.
"""

from __future__ import annotations

import logging

import trio

from payorch.engine.context import Context
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage import claim_takeover

log = logging.getLogger("payorch.supervisors.takeover_loop")

EVERY_S = 1.0


async def take_over_claims_of_gone_nodes(context: Context) -> claim_takeover.Released | None:
    """Release the claims of every gone node; None when there were none."""
    gone = await context.db.autocommit(claim_takeover.gone_claim_owners)
    if not gone:
        return None
    released = await context.db.transaction(claim_takeover.release_claims_of, gone, now=context.clock.now())
    log.warning(
        "took over the claims of nodes that are gone",
        extra={
            "nodes": gone,
            "webhookDeliveries": released.webhook_deliveries,
            "sandboxDeliveries": released.sandbox_deliveries,
            "refundSubmissions": released.refund_submissions,
        },
    )
    context.metrics.claims_taken_over("webhook_delivery", released.webhook_deliveries)
    context.metrics.claims_taken_over("sandbox_delivery", released.sandbox_deliveries)
    context.metrics.claims_taken_over("refund_submission", released.refund_submissions)
    if released.webhook_deliveries:
        context.db.delivery_wakeup.ring()  # the delivery loop claims them now, not at its next poll
    if released.sandbox_deliveries:
        context.db.sandbox_wakeup.ring()  # and the sandbox's sender
    return released


async def _takeover_loop(
    context: Context, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    await take_over_claims_of_gone_nodes(context)
    task_status.started()
    while True:
        await trio.sleep(EVERY_S)
        await take_over_claims_of_gone_nodes(context)


async def run_claim_takeover(
    context: Context, board: SupervisorBoard, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Release the claims of gone nodes now and every `EVERY_S`, restarted when it fails. Started once
    its first pass is done: what nodes that died before this one started had claimed is due again
    before the delivery and refund loops, started after it, make their first round."""
    await supervised(board, "claim takeover", _takeover_loop, context, task_status=task_status)
