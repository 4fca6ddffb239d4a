"""Prometheus scrape endpoint.

Unauthenticated, like `/healthz`: route counts, backlogs and provider latencies are operational
data, not merchants' data, but expose `/metrics` on a private network only (block it at the
load balancer or ingress); see docs/metrics.md.
"""

from __future__ import annotations

import logging

import trio
from quart import Blueprint, Response

from payorch.engine.provider_health import Circuit
from payorch.http.services import Services, services
from payorch.metrics import OutboxBacklog, RuntimeSnapshot
from payorch.storage.database import Database
from payorch.storage.failures import storage_failure
from payorch.storage.metrics_queries import outbox_backlog
from payorch.values.clock import Clock

log = logging.getLogger("payorch.metrics")

blueprint = Blueprint("metrics", __name__)

# The classic text format, which every Prometheus version reads. prometheus_client >= 0.22 names
# version 1.0.0 as its CONTENT_TYPE_LATEST for the same bytes; 0.0.4 is what scrapers expect here.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A scrape must answer even when the database does not: the backlog is then left out.
BACKLOG_QUERY_TIMEOUT_S = 2.0


@blueprint.get("/metrics")
async def metrics() -> Response:
    """Every payorch metric in the Prometheus text format."""
    found = services()
    snapshot = await _snapshot(found)
    return Response(found.context.metrics.exposition(snapshot), content_type=CONTENT_TYPE)


async def _snapshot(found: Services) -> RuntimeSnapshot:
    backlog = await _outbox_backlog(found.context.db, found.context.clock)
    # Read after the await, so the in-memory state is that of the moment the page is rendered.
    now = trio.current_time()
    providers = [provider.name for provider in found.context.providers]
    figures = found.context.health.snapshot(now)
    accounts_open = found.context.health.accounts_not_closed(now)
    return RuntimeSnapshot(
        mailbox_depths=list(found.actors.mailbox_depths().values()),
        mailbox_capacity=found.context.settings.engine.mailbox_size,
        actor_crashes=found.actors.crashes,
        supervisors=dict(found.supervisors.running),
        supervisor_restarts=dict(found.supervisors.restarts),
        outbox=backlog,
        config_generation=found.context.live.generation,
        config_loaded_at=found.context.live.loaded_at,
        provider_circuit_open={
            name: name in figures and figures[name].circuit is not Circuit.CLOSED for name in providers
        },
        account_circuits_open={name: accounts_open.get(name, 0) for name in providers},
        database_server_losses=found.context.db.server_losses,
        database_units=found.context.db.units_handed,
    )


async def _outbox_backlog(db: Database, clock: Clock) -> OutboxBacklog | None:
    with trio.move_on_after(BACKLOG_QUERY_TIMEOUT_S):
        try:
            return await db.autocommit(outbox_backlog, now=clock.now())
        except Exception as error:
            if storage_failure(error) is None:
                raise
            # Down, or no primary among the URL's hosts (a failover): the scrape answers without it.
            log.warning("metrics: could not read the outbox backlog", extra={"error": repr(error)})
            return None
    log.warning("metrics: the outbox backlog query timed out")
    return None
