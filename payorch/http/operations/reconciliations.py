"""Reconciliation runs of an application (docs/reconciliation.md): start one, list them, read one
with its totals, payouts and items. JWT only; another merchant's application is 403."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date

from payorch.http.auth import Principal, application_for
from payorch.http.services import Services
from payorch.providers.settlements import ReportsSettlements
from payorch.storage import reconciliations as store
from payorch.storage.provider_configs import get_provider_config
from payorch.values.errors import ChangeInProgress, FieldProblem, InvalidInput, NotFound
from payorch.values.pagination import PageRequest
from payorch.values.reconciliation import ItemOutcome

MAX_PERIOD_DAYS = 92  # a quarter: a longer period is several runs
_CSV_BATCH = 1000


@dataclass(frozen=True)
class RunRead:
    run: store.Run
    summary: store.RunSummary
    items: list[store.StoredItem]
    total_items: int


async def start_run(
    services: Services, principal: Principal, application_id: str, provider_name: str, first: date, last: date
) -> store.Run:
    """A new run of the application's account at `provider_name` over the UTC days `first` to `last`,
    under way in the background. 400 for a period backwards, too long or in the future, or a provider
    that does not report settlements; 404 when the application has no such provider linked; 409
    while the account has a run under way."""
    application = await application_for(principal, application_id)
    today = services.context.clock.now().date()
    problems = []
    if last < first:
        problems.append(FieldProblem("to", "must not be before from"))
    elif (last - first).days + 1 > MAX_PERIOD_DAYS:
        problems.append(FieldProblem("to", f"a period is at most {MAX_PERIOD_DAYS} days"))
    if first > today:
        problems.append(FieldProblem("from", "must not be after today (UTC)"))
    provider = services.context.providers.get(provider_name)
    if provider is not None and not isinstance(provider, ReportsSettlements):
        problems.append(FieldProblem("provider", f"{provider_name} does not report what it settled"))
    if problems:
        raise InvalidInput("invalid reconciliation", problems)
    config = await services.context.db.autocommit(get_provider_config, application.id, provider_name)
    if provider is None or config is None:
        raise NotFound(
            f"provider {provider_name!r} is not linked to this application", missing="provider configuration"
        )
    assert isinstance(provider, ReportsSettlements)
    run = await services.reconciliations.start(application.id, config, provider, first, last)
    if run is None:
        raise ChangeInProgress(f"a reconciliation of this application's {provider_name} account is under way")
    return run


async def list_runs(
    services: Services, principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[store.Run], int]:
    """A page of the application's runs, newest first."""
    application = await application_for(principal, application_id)
    async with services.limits.list_read(principal.merchant_id):
        return await services.context.db.snapshot(store.list_runs, application.id, page)


async def _run_of(services: Services, principal: Principal, application_id: str, run_id: str) -> store.Run:
    application = await application_for(principal, application_id)
    run = await services.context.db.autocommit(store.get_run, application.id, parse_id_or_404(run_id))
    if run is None:
        raise NotFound("reconciliation not found")
    return run


def parse_id_or_404(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound("reconciliation not found") from None


async def read_run(
    services: Services,
    principal: Principal,
    application_id: str,
    run_id: str,
    page: PageRequest,
    outcome: ItemOutcome | None,
) -> RunRead:
    """The run with its counts, totals, payouts and a page of its items (of one outcome if given)."""
    run = await _run_of(services, principal, application_id, run_id)
    db = services.context.db

    async with services.limits.list_read(principal.merchant_id):
        summary = await db.snapshot(store.summary, run.id)
        items, total = await db.snapshot(store.list_items, run.id, page, outcome)
    return RunRead(run, summary, items, total)


async def run_items(
    services: Services, principal: Principal, application_id: str, run_id: str, outcome: ItemOutcome | None
) -> AsyncIterator[store.StoredItem]:
    """Every item of the run, in order, read a batch at a time (for the CSV)."""
    run = await _run_of(services, principal, application_id, run_id)
    return _every_item(services, run.id, outcome)


async def _every_item(
    services: Services, run_id: uuid.UUID, outcome: ItemOutcome | None
) -> AsyncIterator[store.StoredItem]:
    after = 0
    while True:
        batch = await services.context.db.autocommit(store.items_after, run_id, after, outcome, _CSV_BATCH)
        for item in batch:
            yield item
        if len(batch) < _CSV_BATCH:
            return
        after = batch[-1].seq
