"""Refund submission: refunds the provider has not acknowledged are submitted again, with a growing
pause (`refunds.retry_max_delay_s` at most), until it does, also after a restart: what is due
lives in the database.

Submissions run in slots (`supervisors.slots`), as expiry does: `limits.background_slots` at once,
at most `limits.background_per_merchant` of one merchant's, each in a task of its own, so a provider
that hangs holds only its merchant's share until `refunds.submit_timeout_s`. A refund whose
application's actor is busy (or that fails in payorch) is handed back and waits for a later round,
alone; on shutdown the claims in flight are handed back, so another process need not wait out
their lease."""

from __future__ import annotations

import uuid

import trio

from payorch.engine.commands import PaymentActors
from payorch.engine.context import Context
from payorch.engine.payments.refunds import SubmitRefund
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage import due_work, refunds
from payorch.supervisors.slots import DueWork

POLL_S = 1.0


def _submissions(context: Context, actors: PaymentActors) -> DueWork:
    async def pick(limit: int, skips: due_work.Skips) -> list[due_work.DueItem]:
        lease_s = context.settings.refunds.submit_timeout_s * 2 + 30
        return await context.db.transaction(
            refunds.claim_due_submissions,
            limit,
            lease_s,
            context.node.id,
            per_merchant=context.settings.limits.background_per_merchant,
            skips=skips,
            now=context.clock.now(),
        )

    async def submit(item: due_work.DueItem) -> bool:
        return await actors.ask(item.application_id, SubmitRefund(item.id))

    async def give_back(refund_ids: list[uuid.UUID]) -> None:
        await context.db.transaction(refunds.release_submission_claims, refund_ids, now=context.clock.now())

    return DueWork("refund submission", context, pick=pick, handle=submit, give_back=give_back)


async def _refund_loop(
    context: Context, actors: PaymentActors, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    submissions = _submissions(context, actors)
    try:
        async with trio.open_nursery() as nursery:
            await submissions.round(nursery)
            task_status.started()
            while True:
                # Retries fall due by the clock; what the round left (slots full, a merchant's share
                # taken) is looked for again as soon as a slot frees.
                await submissions.slots.wait_for_wake(POLL_S)
                await submissions.round(nursery)
    finally:
        await submissions.hand_back_in_flight()


async def run_refund_supervisor(
    context: Context,
    actors: PaymentActors,
    board: SupervisorBoard,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Submit due refunds until cancelled, restarted when it fails. Started once its first round has
    claimed what was due as it started (a previous run's submissions included, once the claim
    takeover released them) into its slots."""
    await supervised(board, "refund submission", _refund_loop, context, actors, task_status=task_status)
