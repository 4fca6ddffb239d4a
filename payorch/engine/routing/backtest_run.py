"""One routing backtest of an application (docs/routing.md, "Backtest"): its small inputs read here,
its last sessions read and decided in a backtest worker process (`engine.routing.backtest_processes`).

The decisions are CPU work, tens of microseconds a session, and the rows 100,000 of them: read and
converted here, they would hold the database thread every request shares and Python's interpreter
lock away from the threads that serve every other merchant. So the server reads only the inputs
(the application's configurations, its document in force and its learned rates' rows, a few rows)
and hands the worker plain values (`backtest_worker.Run`: the DSN, the application, the window and
limit, the candidate document and the one in force, `routing_backtest.LinkedProvider`s, the rates'
rows); the worker reads the sessions over a
connection of its own and asks, for each kind of session it meets, what the catalogue's providers
take of it. The backtest holds its worker's turn from its first read to its answer. A cancelled
backtest (its client gone, the service stopping) kills its worker there and then. How many
backtests run and wait at once is the caller's to bound (`http.request_limits`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from payorch.engine.context import Context
from payorch.engine.hot_state import DEFAULT_ROUTING, RoutingInForce
from payorch.engine.routing.backtest import AmountLimits, LinkedProvider, Replay
from payorch.engine.routing.backtest_processes import BacktestProcesses
from payorch.engine.routing.backtest_worker import Run
from payorch.engine.routing.document import RoutingDocument, stored_routing_document
from payorch.engine.routing.sessions import learned_settings
from payorch.engine.routing.success_rates import SegmentFigures
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage import provider_configs, routing_documents, routing_outcomes
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.provider_configs import ProviderConfig
from payorch.storage.routing_outcomes import SegmentOutcomes


@dataclass(frozen=True)
class Backtest:
    """A backtest's answer: the sessions created from `since` until `until` replayed, and what the
    replay found beside the document in force (its `in_force_version`, 0: the default document).
    `limited`: the window held more sessions than the limit, and the replay took the newest;
    `since` is then the oldest replayed session's creation time."""

    since: datetime
    until: datetime
    limited: bool
    replay: Replay
    in_force_version: int


@on_database_thread
async def _inputs(
    conn: Connection, application_id: uuid.UUID, window: int
) -> tuple[list[ProviderConfig], RoutingInForce, list[SegmentOutcomes]]:
    """The application's active configurations, its routing document in force, and its segments'
    newest `window` outcomes."""
    configs = await provider_configs.active_provider_configs(conn, application_id)
    stored = await routing_documents.current_routing_document(conn, application_id)
    in_force = (
        DEFAULT_ROUTING
        if stored is None
        else RoutingInForce(stored_routing_document(stored.document), stored.version)
    )
    return configs, in_force, await routing_outcomes.segment_outcomes(conn, application_id, window)


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
    """Replay `document`, beside the application's document in force replayed the same way, over
    its sessions of the last `days` days, its newest `limit` at most, routed on today's links and
    today's learned rates, in a worker process of `processes`
    once its turn comes (`BacktestWorkerLost`, 503, when that process dies; `BacktestDatabaseUnavailable`,
    503, when it cannot read the sessions); reads, and changes nothing."""
    async with processes.worker() as worker:
        until = context.clock.now()
        since = until - timedelta(days=days)
        section = context.settings.routing
        settings = learned_settings(section)
        configs, in_force, segments = await context.db.autocommit(_inputs, application_id, section.window)
        # The catalogue as it is now, whatever a reload does meanwhile: every batch routes on the same.
        catalogue = ProviderCatalogue(list(context.providers))
        linked = [
            LinkedProvider(config.provider, config.is_active, frozenset(config.payment_methods))
            for config in configs
            if catalogue.get(config.provider) is not None
        ]
        names = {config.provider for config in linked}
        run = Run(
            dsn=context.db.dsn,
            application_id=application_id,
            since=since,
            until=until,
            limit=limit,
            document=document,
            in_force=in_force.document,
            configs=tuple(linked),
            segments=tuple(SegmentFigures(*row) for row in segments),
            settings=settings,
            cpu_share=section.backtest_cpu_share,
        )
        ran = await worker.backtest(run, lambda kinds: _limits_of(catalogue, names, kinds))
    return Backtest(
        since=ran.oldest if ran.oldest is not None else since,
        until=until,
        limited=ran.oldest is not None,
        replay=ran.replay,
        in_force_version=in_force.version,
    )
