"""Floods: other merchants' creates while one merchant floods deep pages of its session list at its
limits, and while a stranger floods a provider-event route.

payorch runs here with its default rate limits (the other scenarios raise them out of reach), on a
fresh embedded PostgreSQL. Two merchants sign up:
- the others: `applications` applications on the sandbox, their creates due at a steady `rate_per_s`
  spread over every application's key (open loop: a server that falls behind shows in the latency);
- the flooder: one application holding `sessions` sessions (written straight into the database) and
  `keys` API keys, asking for its list's page 99999999999 (100 a page) over `connections`
  connections as fast as payorch answers, each request with the next key: every refusal (429) it
  gets is the limits doing their work.
A stranger then posts events with no valid signature to the sandbox's event route of one of the
others' applications, as fast as payorch answers, over `connections` connections.

The figure is the others' create p99 beside each flood against their p99 alone; goal: within 20%.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.load import LoadResult
from bench.measure import Measurement, Shape, measure, measure_beside, progress
from bench.payorch_target import Payorch, Target, bench_settings, create_target, running_payorch
from bench.shop import Application, sandbox_link, signed_up_merchant
from payorch.config import LimitSettings
from payorch.storage.database import Connection, open_database

DEEP_PAGE = "/api/v1/applications/{application_id}/sessions?page=99999999999&limit=100"
# What a stranger posts to a provider-event route: no signature payorch would accept.
FORGED_EVENT = '{"type": "payment.succeeded", "data": {"id": "forged"}}'


@dataclass(frozen=True)
class FloodShape:
    applications: int  # the others'
    rate_per_s: float  # the others' creates, due at this rate
    sessions: int  # in the flooder's application
    keys: int  # the flooder's API keys
    connections: int  # of each flood
    warmup_s: float
    measured_s: float


@dataclass(frozen=True)
class Floods:
    """The others' creates alone and beside each flood, and what each flood got."""

    shape: FloodShape
    alone: Measurement
    beside_pages: Measurement
    pages: LoadResult
    beside_events: Measurement
    events: LoadResult

    def p99_change(self, beside: Measurement) -> float:
        alone = self.alone.result.p99_ms
        return beside.result.p99_ms / alone - 1 if alone else 0.0


async def _seed_sessions(conn: Connection, application_id: uuid.UUID, count: int) -> None:
    """`count` settled sessions of the application, one a second back from the newest."""
    await conn.execute(
        """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
               status, payment_method, customer, created_at, updated_at)
           SELECT gen_random_uuid(), $1, 'bench-seed-' || g, 10000, 'PLN', 'SUCCEEDED', 'card',
               '{"email": "buyer@example.com", "firstName": "Jan", "lastName": "Kowalski"}'::jsonb,
               now() - g * interval '1 second', now()
           FROM generate_series(1, $2) AS g""",
        application_id,
        count,
    )


async def _vacuum_sessions(conn: Connection) -> None:
    await conn.execute("VACUUM (ANALYZE) checkout_sessions")


async def seed_sessions(payorch: Payorch, application: Application, count: int) -> None:
    """Write `count` sessions of `application` straight into payorch's database, then vacuum and
    analyse their table: else autovacuum's next pass (within a minute) does, about 0.3 s of a core
    for 100,000 sessions, in whichever window is measured then, and the creates measured beside it
    wait up to 100 ms: a cost of the seed written at once, not of what the window measures."""
    async with open_database(payorch.service.db.dsn, min_size=1, max_size=1) as db:
        await db.transaction(_seed_sessions, uuid.UUID(application.id), count)
        await db.autocommit(_vacuum_sessions)


async def measure_floods(work_dir: Path, shape: FloodShape) -> Floods:
    """The three runs, on one payorch with its default limits."""
    settings = bench_settings(work_dir, limits=LimitSettings())
    paced = Shape(
        connections=16, warmup_s=shape.warmup_s, measured_s=shape.measured_s, rate_per_s=shape.rate_per_s
    )
    flood = Shape(connections=shape.connections, warmup_s=shape.warmup_s, measured_s=shape.measured_s)
    async with (
        running_payorch(settings, work_dir / "payorch.log") as payorch,
        signed_up_merchant(payorch) as others,
        signed_up_merchant(payorch, "flooder@merchant.example", 2) as flooder,
    ):
        progress(f"floods: {shape.applications} applications of the others, one of the flooder's")
        many = await others.new_applications(shape.applications, sandbox_link())
        creates = create_target(payorch.base_url, [application.api_key for application in many])
        deep = await flooder.new_application("Bench deep pages", sandbox_link())
        keys = [deep.api_key, *await flooder.more_api_keys(deep, shape.keys - 1)]
        progress(f"floods: writing {shape.sessions} sessions of the flooder's application")
        await seed_sessions(payorch, deep, shape.sessions)
        pages = Target(
            url=payorch.base_url + DEEP_PAGE.format(application_id=deep.id),
            headers={},
            method="GET",
            body="",
            unique_header=None,
            header_sets=[{"X-API-Key": key} for key in keys],
        )
        events = Target(
            url=f"{payorch.base_url}/api/v1/provider-events/sandbox/{many[0].id}",
            headers={},
            body=FORGED_EVENT,
            unique_header=None,
        )
        label = f"others' creates, {shape.rate_per_s:g}/s due"
        alone = await measure(f"{label}, alone", creates, paced)
        beside_pages, pages_result = await measure_beside(
            f"{label}, deep pages beside", creates, paced, pages, flood
        )
        beside_events, events_result = await measure_beside(
            f"{label}, forged events beside", creates, paced, events, flood, probed=False
        )
        progress("stopping payorch")
    return Floods(shape, alone, beside_pages, pages_result, beside_events, events_result)
