"""One routing backtest of an application (docs/routing.md, "Backtest"): its inputs read, its last
sessions read in batches and replayed (`engine.routing_backtest`) in a worker thread.

The replay is CPU work, tens of microseconds a session: 100,000 sessions would hold the event loop
for seconds, and every other merchant's requests with it. So each batch is decided in a thread
(`trio.to_thread.run_sync`: the decision is pure code, and the `Replayer` is used by one thread at
a time), while the event loop serves the rest; the thread checks between every
`CHECKPOINT_EVERY` sessions whether the request was cancelled (its client gone, the service
stopping) and stops there. How many backtests run at once is the caller's to bound
(`http.request_limits`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import trio

from payorch.engine.context import Context
from payorch.engine.routing_backtest import Replay, Replayer
from payorch.engine.routing_rules import RoutingDocument
from payorch.engine.session_routing import accepts_of, learned_settings
from payorch.engine.success_rates import SegmentFigures, SuccessRates
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage import provider_configs, routing_history, routing_outcomes
from payorch.storage.database import Connection
from payorch.storage.provider_configs import ProviderConfig
from payorch.storage.routing_outcomes import SegmentOutcomes

BATCH = 10_000  # sessions read (one statement) and replayed (one thread's turn) at a time


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


async def run_backtest(
    context: Context, application_id: uuid.UUID, document: RoutingDocument, *, days: int, limit: int
) -> Backtest:
    """Replay `document` over the application's sessions of the last `days` days, its newest `limit`
    at most, routed on today's links and today's learned rates; reads, and changes nothing."""
    until = context.clock.now()
    since = until - timedelta(days=days)
    section = context.settings.routing
    settings = learned_settings(section)
    configs, segments = await context.db.autocommit(_inputs, application_id, section.window)
    # The catalogue as it is now, whatever a reload does meanwhile: every batch routes on the same.
    catalogue = ProviderCatalogue(list(context.providers))
    linked = [config for config in configs if catalogue.get(config.provider) is not None]
    rates = await trio.to_thread.run_sync(
        SuccessRates.from_rows, [SegmentFigures(*row) for row in segments], settings
    )
    replayer = Replayer(document, linked, accepts_of(catalogue), rates, settings)
    cursor: routing_history.Cursor | None = routing_history.first_cursor(until)
    left, limited = limit, False
    while cursor is not None and left > 0:
        batch, cursor = await context.db.autocommit(
            routing_history.past_sessions, application_id, since, cursor, min(BATCH, left)
        )
        left -= len(batch)
        await trio.to_thread.run_sync(replayer.replay, batch, trio.from_thread.check_cancelled)
    if cursor is not None:  # the limit is reached: is there an older session in the window?
        older, _ = await context.db.autocommit(
            routing_history.past_sessions, application_id, since, cursor, 1
        )
        limited = bool(older)
    return Backtest(
        since=cursor[0] if limited and cursor is not None else since,
        until=until,
        limited=limited,
        replay=await trio.to_thread.run_sync(replayer.result),
    )
