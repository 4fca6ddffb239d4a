"""One routing backtest of an application (docs/routing.md, "Backtest"): its inputs read, its last
sessions read in batches, and each batch decided in a backtest worker process
(`engine.backtest_processes`).

The decisions are CPU work, tens of microseconds a session: 100,000 sessions would hold the event
loop for seconds, and in a thread of this process Python's interpreter lock away from the threads
that serve every other merchant. So only the reads run here (asyncpg, on its own thread) and the
decisions in the worker process, whose turn the backtest holds from its first read to its answer:
the worker is given the inputs as plain values (`routing_backtest.LinkedProvider`, the learned
rates' rows, what the catalogue's providers take of each kind of session met) and each batch as it
is read. A cancelled backtest (its client gone, the service stopping) kills its worker there and
then. How many backtests run and wait at once is the caller's to bound (`http.request_limits`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from payorch.engine.backtest_processes import BacktestProcesses
from payorch.engine.context import Context
from payorch.engine.routing_backtest import AmountLimits, LinkedProvider, Replay
from payorch.engine.routing_rules import RoutingDocument
from payorch.engine.session_routing import learned_settings
from payorch.engine.success_rates import SegmentFigures
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage import provider_configs, routing_history, routing_outcomes
from payorch.storage.database import Connection
from payorch.storage.provider_configs import ProviderConfig
from payorch.storage.routing_outcomes import SegmentOutcomes

BATCH = 10_000  # sessions read (one statement) and sent to the worker process at a time


@dataclass(frozen=True)
class Backtest:
    """A backtest's answer: the sessions created from `since` until `until` replayed, and what the
    replay found. `limited`: the window held more sessions than the limit, and the replay took the
    newest; `since` is then the oldest replayed session's creation time."""

    since: datetime
    until: datetime
    limited: bool
    replay: Replay


async def _inputs(
    conn: Connection, application_id: uuid.UUID, window: int
) -> tuple[list[ProviderConfig], list[SegmentOutcomes]]:
    """The application's active configurations, and its segments' newest `window` outcomes."""
    configs = await provider_configs.active_provider_configs(conn, application_id)
    return configs, await routing_outcomes.segment_outcomes(conn, application_id, window)


def _limits_of(
    catalogue: ProviderCatalogue, names: Iterable[str], kinds: Iterable[tuple[str, str]]
) -> AmountLimits:
    """What the providers `names` of the catalogue take of each kind of session (payment method and
    currency) of `kinds`, as `session_routing.accepts_of` asks the catalogue."""
    found: AmountLimits = {}
    for name in names:
        provider = catalogue.get(name)
        for method, currency in kinds:
            limits = (
                provider.limits(currency, method)
                if provider is not None and method in provider.payment_methods
                else None
            )
            found[name, method, currency] = None if limits is None else (limits.min_minor, limits.max_minor)
    return found


async def run_backtest(
    context: Context,
    processes: BacktestProcesses,
    application_id: uuid.UUID,
    document: RoutingDocument,
    *,
    days: int,
    limit: int,
) -> Backtest:
    """Replay `document` over the application's sessions of the last `days` days, its newest `limit`
    at most, routed on today's links and today's learned rates, in a worker process of `processes`
    once its turn comes (`BacktestWorkerLost`, 503, when that process dies); reads, and changes
    nothing."""
    async with processes.worker() as worker:
        until = context.clock.now()
        since = until - timedelta(days=days)
        section = context.settings.routing
        settings = learned_settings(section)
        configs, segments = await context.db.autocommit(_inputs, application_id, section.window)
        # The catalogue as it is now, whatever a reload does meanwhile: every batch routes on the same.
        catalogue = ProviderCatalogue(list(context.providers))
        linked = [
            LinkedProvider(config.provider, config.is_active, frozenset(config.payment_methods))
            for config in configs
            if catalogue.get(config.provider) is not None
        ]
        await worker.begin(document, linked, [SegmentFigures(*row) for row in segments], settings)
        names = {config.provider for config in linked}
        told: set[tuple[str, str]] = set()  # the kinds of session the worker knows the limits of
        cursor: routing_history.Cursor | None = routing_history.first_cursor(until)
        left, limited = limit, False
        while cursor is not None and left > 0:
            batch, cursor = await context.db.autocommit(
                routing_history.past_sessions, application_id, since, cursor, min(BATCH, left)
            )
            left -= len(batch)
            kinds = {(past.payment_method, past.currency) for past in batch} - told
            told |= kinds
            await worker.decide(batch, _limits_of(catalogue, names, kinds))
        if cursor is not None:  # the limit is reached: is there an older session in the window?
            older, _ = await context.db.autocommit(
                routing_history.past_sessions, application_id, since, cursor, 1
            )
            limited = bool(older)
        replay = await worker.finish()
    return Backtest(
        since=cursor[0] if limited and cursor is not None else since,
        until=until,
        limited=limited,
        replay=replay,
    )
