"""Reconciliation runs, off the request path: `ReconciliationRuns.start` stores a RUNNING run and
hands it to a task of its own nursery, which the runtime starts with the service.

A run of an application's account at a provider over the UTC days `first` to `last`:
1. streams the provider's settled items (`ReportsSettlements.settled_items`), `_BATCH` at a time:
   looks each batch's references up among the application's sessions, attempts and refunds in a
   statement for each kind the batch holds, matches each item (`match.match_settled`) and stores the batch;
2. repairs each payment payorch has unpaid in one of its sessions (`repair`), as the batch is stored;
3. reads, a batch at a time, the application's paid sessions and COMPLETED refunds at the provider
   that were made on the days whose settlement falls in the period (`first - lag` to `last - lag`)
   and that no item matched: EXPECTED or MISSING_AT_PROVIDER (`match.unsettled_outcome`);
4. stores each payout arriving in the period beside the nets of the items it carried: those the
   provider lists for it (`ListsPayoutItems`), else the run's items that name it.

So a run holds one batch in memory, however long the period. Its statements of steps 1 to 3 go
over a connection of its own (`RUN_CONNECTION`, outside the pool, opened with its turn and closed
when it ends), whose PostgreSQL backend runs at the least priority when it is a process of this
host (`lower_local_backend_priority`, as a backtest's reader): the requests' backends come first.
Bounds: one RUNNING run per application and provider (the database refuses a second: `start`
answers None), and this process runs `limits.background_per_merchant` runs at once, one merchant's
`pacing.RUNS_PER_MERCHANT` at most, the others waiting their turn. A page the provider answers
with a 429 or a 5xx is asked again (`pacing.PageRetries`), after its `Retry-After` or a doubling
pause, the run giving its turn to the others while it waits: so it slows its own
account alone. A run rests after each batch: the process's runs together take at most
`reconciliation.time_share` of the server's time (`pacing.RunsShare`), and its Python work comes
in slices of `_SLICE` items between checkpoints.
A run that fails (the provider's error, a page still busy after `reconciliation.page_attempts`
tries, the database's, its own connection lost) or is cancelled ends FAILED with its error; its
items stay, each batch's whole (one statement).
A run left RUNNING by a process that died is ended FAILED by the next start after `ABANDONED_AFTER`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import TypeVar

import trio

from payorch.engine.commands import PaymentActors
from payorch.engine.context import Context
from payorch.engine.reconciliation.events import complete_run
from payorch.engine.reconciliation.match import Finding, match_settled, unsettled_payment, unsettled_refund
from payorch.engine.reconciliation.pacing import RUNS_PER_MERCHANT, Pace, PageRetries, RunsShare, Turn, Turns
from payorch.engine.reconciliation.repair import repair
from payorch.providers.base import ProviderError
from payorch.providers.settlements import ListsPayoutItems, ReportsSettlements, SettledItem, SettledKind
from payorch.storage import reconciliation_sources as sources
from payorch.storage import reconciliations as store
from payorch.storage.applications import get_application
from payorch.storage.backend_priority import lower_local_backend_priority
from payorch.storage.dedicated import DedicatedConnection
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.reconciliation import ItemOutcome, RunState

log = logging.getLogger("payorch.reconciliation")

# Items read, matched and stored per batch: each of a batch's statements is short (a millisecond or
# two), so that a merchant's request queued behind it on the database's thread waits little.
_BATCH = 100
# Items handled between two checkpoints: the run's Python work comes in slices this short (a
# millisecond or two), so that a merchant's request never waits behind a whole batch of it.
_SLICE = 50
R = TypeVar("R")  # a row of what payorch recorded: a payment, a refund
# A run RUNNING this long was left by a process that died: the next start ends it FAILED. Far
# beyond any run's length (a period of 100,000 payments takes well under a minute).
ABANDONED_AFTER = timedelta(hours=1)
# A run's own connection, named "payorch reconciliation" in `pg_stat_activity`.
RUN_CONNECTION = "reconciliation"


class ReconciliationRuns:
    """Starts runs and runs them in its nursery (`run`, started by the runtime)."""

    def __init__(self, context: Context, actors: PaymentActors) -> None:
        self._context = context
        self._actors = actors
        self._nursery: trio.Nursery | None = None
        self._turns = Turns(context.settings.limits.background_per_merchant, RUNS_PER_MERCHANT)
        self._share = RunsShare(context.settings.reconciliation.time_share)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the nursery runs run in until cancelled (the runtime stopping cancels them)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def start(
        self,
        application_id: uuid.UUID,
        config: ProviderConfig,
        provider: ReportsSettlements,
        first: date,
        last: date,
    ) -> store.Run | None:
        """A new run, under way in the background; None while the account has one running."""
        assert self._nursery is not None, "ReconciliationRuns.run was not started"
        now = self._context.clock.now()
        run = await self._context.db.transaction(
            store.start_run,
            uuid.uuid4(),
            application_id,
            config.provider,
            first,
            last,
            now=now,
            abandoned_before=now - ABANDONED_AFTER,
        )
        if run is not None:
            self._nursery.start_soon(self._execute, run, config, provider)
        return run

    async def _execute(self, run: store.Run, config: ProviderConfig, provider: ReportsSettlements) -> None:
        state, error, counted = RunState.FAILED, None, _Counted()
        try:
            application = await self._context.db.autocommit(get_application, run.application_id)
            assert application is not None  # a run's application is never deleted
            async with (
                Turn(self._turns, application.merchant_id) as turn,
                self._context.db.dedicated_connection(RUN_CONNECTION) as conn,
            ):
                backend = await conn.run(store.prepare_run_connection)
                lower_local_backend_priority(backend)
                retries = PageRetries(self._context.settings.reconciliation, turn, run)
                await _Reconciliation(
                    self._context,
                    self._actors,
                    conn,
                    run,
                    config,
                    provider,
                    counted,
                    Pace(self._share, retries),
                ).reconcile()
            state = RunState.COMPLETED
        except ProviderError as exc:
            error = f"the provider failed: {exc}"
        except trio.Cancelled:
            error = "the service stopped during the run"
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self._finish(run, state, error, counted)
            raise
        except Exception as exc:
            log.exception("reconciliation run failed", extra={"runId": str(run.id)})
            error = f"the run failed: {type(exc).__name__}"
        await self._finish(run, state, error, counted)

    async def _finish(self, run: store.Run, state: RunState, error: str | None, counted: _Counted) -> None:
        if state is RunState.COMPLETED:
            now = self._context.clock.now()
            await self._context.db.transaction(complete_run, run, repaired=counted.repaired, now=now)
            return
        await self._context.db.transaction(
            store.finish_run,
            run.id,
            state,
            error=error,
            repaired=counted.repaired,
            now=self._context.clock.now(),
        )


class _Counted:
    def __init__(self) -> None:
        self.seq = 0
        self.repaired = 0


class _Reconciliation:
    """One run's work (see the module docstring)."""

    def __init__(
        self,
        context: Context,
        actors: PaymentActors,
        conn: DedicatedConnection,
        run: store.Run,
        config: ProviderConfig,
        provider: ReportsSettlements,
        counted: _Counted,
        pace: Pace,
    ) -> None:
        self.context, self.actors, self.conn, self.run, self.config, self.provider = (
            context,
            actors,
            conn,
            run,
            config,
            provider,
        )
        self.counted, self.pace, self.retries = counted, pace, pace.retries
        self.today = context.clock.now().astimezone(UTC).date()

    async def reconcile(self) -> None:
        credentials = self.context.credentials(self.config)
        first, last = self.run.first_day, self.run.last_day
        batch: list[SettledItem] = []
        async for item in self.provider.settled_items(credentials, first, last, self.retries):
            batch.append(item)
            if len(batch) % _SLICE == 0:
                await trio.lowlevel.checkpoint()
            if len(batch) == _BATCH:
                await self._settled(batch)
                batch = []
        await self._settled(batch)
        await self._unsettled()
        async for payout in self.provider.payouts(credentials, first, last, self.retries):
            items_minor = None
            if isinstance(self.provider, ListsPayoutItems):
                # The payout may carry items settled before the period: the provider lists them.
                items_minor = 0
                async for carried in self.provider.payout_items(credentials, payout, self.retries):
                    items_minor += carried.net_minor
            await self.context.db.transaction(
                store.insert_payout,
                self.run.id,
                payout_id=payout.payout_id,
                currency=payout.currency,
                amount_minor=payout.amount_minor,
                arrives_on=payout.arrives_on,
                reported_as=payout.status,
                items_minor=items_minor,
            )
            await self.pace.rest()

    async def _settled(self, items: list[SettledItem]) -> None:
        if not items:
            return
        conn, run = self.conn, self.run
        payment_refs = [
            i.payment_reference for i in items if i.kind is SettledKind.PAYMENT and i.payment_reference
        ]
        refund_refs = [
            i.refund_reference for i in items if i.kind is SettledKind.REFUND and i.refund_reference
        ]
        payments = await conn.run(sources.recorded_payments, run.application_id, run.provider, payment_refs)
        refunds = await conn.run(sources.recorded_refunds, run.application_id, run.provider, refund_refs)
        findings: list[Finding] = []
        for start in range(0, len(items), _SLICE):
            findings += [
                match_settled(
                    item,
                    payments.get(item.payment_reference or "") if item.kind is SettledKind.PAYMENT else None,
                    refunds.get(item.refund_reference or "") if item.kind is SettledKind.REFUND else None,
                )
                for item in items[start : start + _SLICE]
            ]
            await trio.lowlevel.checkpoint()
        first_seq = await self._store(findings)
        for offset, finding in enumerate(findings):
            if not finding.repairable or finding.session_id is None or finding.settled is None:
                continue
            checkout = payments[finding.settled.payment_reference or ""].checkout_reference
            if await repair(self.actors, run.application_id, run.provider, finding, checkout):
                await conn.run(store.mark_repaired, run.id, first_seq + offset)
                self.counted.repaired += 1
                self.context.metrics.reconciliation_repair(run.provider)

    async def _unsettled(self) -> None:
        run, lag = self.run, self.provider.settlement_lag_days
        since = datetime.combine(run.first_day - timedelta(days=lag), time(), UTC)
        until = datetime.combine(run.last_day + timedelta(days=1 - lag), time(), UTC)
        await self._each_unsettled(
            sources.unsettled_payments,
            since,
            until,
            lambda payment: unsettled_payment(payment, lag, self.today),
            lambda payment: (payment.created_at, payment.session_id),
        )
        await self._each_unsettled(
            sources.unsettled_refunds,
            since,
            until,
            lambda refund: unsettled_refund(refund, lag, self.today),
            lambda refund: (refund.created_at, refund.refund_id),
        )

    async def _each_unsettled(
        self,
        read: Callable[..., Awaitable[list[R]]],
        since: datetime,
        until: datetime,
        finding: Callable[[R], Finding],
        key: Callable[[R], tuple[datetime, uuid.UUID]],
    ) -> None:
        """Store a finding for each row `read` answers, `_BATCH` at a time, in its keyset's order."""
        run, after = self.run, None
        while True:
            rows = await self.conn.run(
                read, run.id, run.application_id, run.provider, since, until, after, _BATCH
            )
            await self._store([finding(row) for row in rows])
            if len(rows) < _BATCH:
                return
            after = key(rows[-1])

    async def _store(self, findings: list[Finding]) -> int:
        """Store `findings` as the run's next items; answers the first one's `seq`."""
        first_seq = self.counted.seq + 1
        rows: list[tuple[object, ...]] = []
        for start in range(0, len(findings), _SLICE):
            rows += [_row(first_seq + start + n, f) for n, f in enumerate(findings[start : start + _SLICE])]
            await trio.lowlevel.checkpoint()
        await self.conn.run(store.insert_items, self.run.id, rows)
        self.counted.seq += len(rows)
        await self.pace.rest()
        for outcome in ItemOutcome:
            count = sum(1 for finding in findings if finding.outcome is outcome)
            self.context.metrics.reconciliation_items(self.run.provider, outcome.value, count)
        return first_seq


def _row(seq: int, finding: Finding) -> tuple[object, ...]:
    """An item's values in `store.ITEM_COLUMNS`' order."""
    item = finding.settled
    if item is None:
        kind = SettledKind.REFUND if finding.refund_id is not None else SettledKind.PAYMENT
        return (
            seq,
            finding.outcome.value,
            kind.value,
            None,
            finding.currency,
            None,
            None,
            None,
            finding.recorded_minor,
            None,
            None,
            None,
            None,
            None,
            finding.session_id,
            finding.refund_id,
        )
    return (
        seq,
        finding.outcome.value,
        item.kind.value,
        item.item_id,
        item.currency,
        item.gross_minor,
        item.fee_minor,
        item.net_minor,
        finding.recorded_minor,
        item.settled_on,
        item.payment_reference,
        item.refund_reference,
        item.payout_id,
        item.method,
        finding.session_id,
        finding.refund_id,
    )
