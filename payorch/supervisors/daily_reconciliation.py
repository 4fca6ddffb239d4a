"""Daily reconciliation: every day, once `reconciliation.run_at_utc` has passed, each linked account
of a provider that reports settlements (`ReportsSettlements`) is reconciled for the UTC day its
settlements lag behind (today minus the provider's `settlement_lag_days`).

Which process starts a day's run of an account is decided in PostgreSQL
(`storage.daily_reconciliations`): one claim per account and day, so several processes on one
database start one run. The runs themselves run as any other (`engine.reconciliation.runs`): one per
account at a time, `limits.background_per_merchant` at once in this process. A run that fails (a
provider's 429 or 5xx) leaves that account's day to be claimed again after a pause that doubles per
try (`reconciliation.retry_first_s` up to `retry_max_s`); other accounts and the loop go on."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, time, timedelta

import trio

from payorch.engine.context import Context
from payorch.engine.reconciliation.runs import ReconciliationRuns
from payorch.providers.settlements import ReportsSettlements
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage import daily_reconciliations as daily
from payorch.storage.provider_configs import get_provider_config

log = logging.getLogger("payorch.reconciliation")

POLL_S = 1.0


def _due(now: datetime, run_at_utc: str) -> bool:
    hours, minutes = (int(part) for part in run_at_utc.split(":"))
    return now.astimezone(UTC).time() >= time(hours, minutes)


async def start_due_runs(context: Context, runs: ReconciliationRuns) -> int:
    """Claim and start the daily runs due now; returns how many started."""
    settings = context.settings.reconciliation
    now = context.clock.now()
    if not settings.daily or not _due(now, settings.run_at_utc):
        return 0
    started = 0
    for provider in list(context.providers):
        if not isinstance(provider, ReportsSettlements):
            continue
        name = provider.name
        day = now.astimezone(UTC).date() - timedelta(days=provider.settlement_lag_days)
        claims = await context.db.transaction(
            daily.claim_day,
            name,
            day,
            now=now,
            first_pause_s=settings.retry_first_s,
            longest_pause_s=settings.retry_max_s,
        )
        for claim in claims:
            config = await context.db.autocommit(get_provider_config, claim.application_id, name)
            if config is None:
                continue
            run = await runs.start(claim.application_id, config, provider, day, day)
            if run is None:  # a run of the account is under way: the claim is tried again later
                continue
            await context.db.autocommit(daily.set_run, claim, run.id)
            started += 1
            log.info(
                "daily reconciliation started",
                extra={"applicationId": str(claim.application_id), "provider": name, "runId": str(run.id)},
            )
    return started


async def _daily_loop(
    context: Context,
    runs: ReconciliationRuns,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    task_status.started()
    while True:
        await start_due_runs(context, runs)
        await trio.sleep(POLL_S)


async def run_daily_reconciliation(
    context: Context,
    runs: ReconciliationRuns,
    board: SupervisorBoard,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Start each day's reconciliation runs until cancelled, restarted when it fails."""
    await supervised(board, "daily reconciliation", _daily_loop, context, runs, task_status=task_status)
