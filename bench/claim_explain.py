"""The webhook delivery claim beside one merchant's backlog of a million deliveries: its plans and
its time, as payorch claimed before migration 0021 and as it claims now.

`python -m bench.claim_explain [--deliveries N]` starts an embedded PostgreSQL under a temporary
directory, migrates it and writes, straight into the tables (INSERT ... SELECT generate_series):
- merchant A: one application with `ENDPOINTS` webhook endpoints (the cap per application) and N
  PENDING deliveries spread over them, each the event of a session of its own, all due for an hour;
- `QUIET` other merchants: one application, one endpoint and one delivery each, due a second ago.
The tables are then vacuumed and analysed, as autovacuum would leave them.

First the claim before 0021 (its statements below, as of commit 719f252), on 0021's indexes
undone; then 0021's SQL applied again (`payorch/storage/migrations/0021_...sql`) and the claim as
`claim_due_deliveries` makes it. For each: `EXPLAIN (ANALYZE, BUFFERS)` of its two statements as the
delivery loop runs them (`DELIVERY_SLOTS` free slots, nothing in flight), how many deliveries each
merchant got, and how long whole claims take, each in a transaction rolled back, so every claim
finds the same rows.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import trio

from bench.measure import progress
from payorch.storage.database import Connection, Database, open_database
from payorch.storage.embedded import start_embedded_postgres
from payorch.storage.migrations import migrate
from payorch.storage.webhook_deliveries import (
    CLAIM_DELIVERIES,
    CLAIM_ENDPOINTS,
    MERCHANT_CLAIM_LOCK,
    claim_due_deliveries,
)
from payorch.supervisors.delivery_loop import DELIVERY_SLOTS, IN_FLIGHT_PER_ENDPOINT, IN_FLIGHT_PER_MERCHANT
from payorch.values.clock import SYSTEM_CLOCK

DELIVERIES = 1_000_000
ENDPOINTS = 100  # limits.webhooks_per_application's default
QUIET = 5
BATCH = 100_000  # deliveries written per statement
CLAIMS = 20  # timed, after 3 untimed
LEASE_S = 20.0
# 0021 undone: the claim before it had `webhook_deliveries_due` and none of 0021's indexes.
UNDO_0021 = """
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
    DROP INDEX webhook_deliveries_pending_by_application;
    DROP INDEX webhook_deliveries_pending_by_config;
    DROP INDEX webhook_deliveries_pending_by_session;
    ANALYZE webhook_deliveries;"""
REDO_0021 = (
    resources.files("payorch.storage.migrations")
    .joinpath("0021_delivery_claims_per_endpoint.sql")
    .read_text()
    + "\nANALYZE webhook_deliveries;"
)

_SEED = """
    WITH configs AS (
        SELECT id, application_id, row_number() OVER (ORDER BY id) - 1 AS place
        FROM webhook_configs WHERE application_id = $1),
    numbered AS (SELECT n, gen_random_uuid() AS session_id FROM generate_series($2::int, $3::int) n),
    sessions AS (
        INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
                                       status, payment_method, customer)
        SELECT session_id, $1, 'bench-' || n, 10000, 'PLN', 'SUCCEEDED', 'card', '{}'::jsonb
        FROM numbered),
    events AS (
        INSERT INTO outbox_events (id, application_id, session_id, type, payload, fanned_out_at)
        SELECT 'evt_bench_' || n, $1, session_id, 'session.completed', '{"bench": true}'::jsonb, $4
        FROM numbered ORDER BY n RETURNING seq, session_id)
    INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id, status,
                                    next_attempt_at)
    SELECT gen_random_uuid(), c.id, $1, e.seq, e.session_id, 'PENDING',
           $5::timestamptz + make_interval(secs => e.seq * $6::float8)
    FROM events e JOIN configs c ON c.place = e.seq % (SELECT count(*) FROM configs)"""

# The claim before migration 0021 (commit 719f252): every merchant's claimable deliveries grouped
# per endpoint to choose the endpoints, then every claimable delivery of those endpoints numbered.
_CLAIMABLE_BEFORE = """d.status = 'PENDING' AND d.next_attempt_at <= $now
    AND (d.claimed_until IS NULL OR d.claimed_until <= $now)
    AND NOT EXISTS (
        SELECT 1 FROM webhook_deliveries earlier
        WHERE earlier.config_id = d.config_id AND earlier.session_id = d.session_id
          AND earlier.event_seq < d.event_seq AND earlier.status = 'PENDING')"""
_IN_FLIGHT_BEFORE = "status = 'PENDING' AND claimed_until > $now"
_MERCHANT_IN_FLIGHT_BEFORE = """(SELECT count(*) FROM webhook_deliveries f
    JOIN applications fa ON fa.id = f.application_id
    WHERE fa.merchant_id = a.merchant_id AND f.status = 'PENDING' AND f.claimed_until > $now)"""
ENDPOINTS_BEFORE = f"""SELECT c.id, a.merchant_id FROM webhook_configs c
    JOIN applications a ON a.id = c.application_id
    JOIN (SELECT d.config_id, min(d.next_attempt_at) AS waiting_since
          FROM webhook_deliveries d WHERE {_CLAIMABLE_BEFORE} GROUP BY d.config_id) due
         ON due.config_id = c.id
    WHERE c.is_active AND c.deleted_at IS NULL
      AND (SELECT count(*) FROM webhook_deliveries WHERE config_id = c.id AND {_IN_FLIGHT_BEFORE}) < $2
      AND {_MERCHANT_IN_FLIGHT_BEFORE} < $3
    ORDER BY due.waiting_since, c.id LIMIT $1
    FOR NO KEY UPDATE OF c SKIP LOCKED""".replace("$now", "$4")  # noqa: S608 - fragments of this module
DELIVERIES_BEFORE = f"""WITH claimable AS (
        SELECT d.id, d.config_id, d.next_attempt_at,
               row_number() OVER (PARTITION BY d.config_id ORDER BY d.next_attempt_at, d.event_seq) AS place
        FROM webhook_deliveries d
        WHERE d.config_id = ANY($1::uuid[]) AND {_CLAIMABLE_BEFORE}),
    in_flight AS (
        SELECT config_id, count(*) AS attempts FROM webhook_deliveries
        WHERE config_id = ANY($1::uuid[]) AND {_IN_FLIGHT_BEFORE} GROUP BY config_id),
    within_endpoint AS (
        SELECT claimable.id, claimable.place, claimable.next_attempt_at, a.merchant_id,
               {_MERCHANT_IN_FLIGHT_BEFORE} AS merchant_attempts
        FROM claimable LEFT JOIN in_flight USING (config_id)
        JOIN webhook_configs ec ON ec.id = claimable.config_id
        JOIN applications a ON a.id = ec.application_id
        WHERE claimable.place <= $2 - coalesce(in_flight.attempts, 0)),
    picked AS (
        SELECT ranked.id FROM (
            SELECT w.*, row_number() OVER (
                PARTITION BY w.merchant_id ORDER BY w.place, w.next_attempt_at, w.id
            ) AS merchant_place
            FROM within_endpoint w) ranked
        WHERE ranked.merchant_place <= $5 - ranked.merchant_attempts
        ORDER BY ranked.place, ranked.next_attempt_at, ranked.id LIMIT $3)
    UPDATE webhook_deliveries d
       SET attempts = d.attempts + 1, last_attempt_at = $now,
           claimed_until = $now::timestamptz + make_interval(secs => $4),
           next_attempt_at = $now::timestamptz + make_interval(secs => $4), claimed_by = $6
      FROM picked, webhook_configs c, outbox_events e
     WHERE d.id = picked.id AND c.id = d.config_id AND e.seq = d.event_seq AND d.status = 'PENDING'
 RETURNING d.id, d.application_id""".replace("$now", "$7")  # noqa: S608 - fragments of this module

Statements = tuple[str, str]  # (endpoints, deliveries)
AFTER: Statements = (CLAIM_ENDPOINTS, CLAIM_DELIVERIES)
BEFORE: Statements = (ENDPOINTS_BEFORE, DELIVERIES_BEFORE)


async def _merchant_with_application(conn: Connection, name: str) -> uuid.UUID:
    merchant_id, application_id = uuid.uuid4(), uuid.uuid4()
    await conn.execute(
        """INSERT INTO merchants (id, legal_business_name, company_registration_number, organization)
           VALUES ($1, $2, $2, '{}'::jsonb)""",
        merchant_id,
        name,
    )
    await conn.execute(
        "INSERT INTO applications (id, merchant_id, name) VALUES ($1, $2, $3)",
        application_id,
        merchant_id,
        name,
    )
    return application_id


async def _endpoints(conn: Connection, application_id: uuid.UUID, count: int) -> None:
    await conn.execute(
        """INSERT INTO webhook_configs (id, application_id, url, subscribed_events, secret, key_fingerprint)
           SELECT gen_random_uuid(), $1, 'https://receiver.example/hooks/' || n,
                  ARRAY['session.completed'], '\\x00'::bytea, 'sha256:0'
           FROM generate_series(1, $2) n""",
        application_id,
        count,
    )


async def seed(db: Database, deliveries: int) -> dict[uuid.UUID, str]:
    """Write the scenario (see the module's description); returns each application's merchant name."""
    now = SYSTEM_CLOCK.now()
    names = {}
    deep = await db.transaction(_merchant_with_application, "A (deep backlog)")
    names[deep] = "A"
    await db.transaction(_endpoints, deep, ENDPOINTS)
    for start in range(1, deliveries + 1, BATCH):
        end = min(start + BATCH - 1, deliveries)
        progress(f"claim_explain: A's deliveries {start:,}..{end:,} of {deliveries:,}")
        hour_ago = datetime.fromtimestamp(now.timestamp() - 3600, tz=now.tzinfo)
        await db.transaction(_seed_batch, deep, start, end, now, hour_ago, 0.001)  # a millisecond apart
    for number in range(QUIET):
        quiet = await db.transaction(_merchant_with_application, f"quiet {number}")
        names[quiet] = f"quiet {number}"
        await db.transaction(_endpoints, quiet, 1)
        second_ago = datetime.fromtimestamp(now.timestamp() - 1, tz=now.tzinfo)
        number_of_event = deliveries + 1 + number
        await db.transaction(_seed_batch, quiet, number_of_event, number_of_event, now, second_ago, 0.0)
    progress("claim_explain: VACUUM ANALYZE")
    await db.autocommit(_vacuum)
    return names


async def _seed_batch(
    conn: Connection,
    application_id: uuid.UUID,
    start: int,
    end: int,
    now: datetime,
    due_at: datetime,
    apart_s: float,
) -> None:
    """Events `start`..`end` of the application, their deliveries due from `due_at` on, each
    `apart_s` (per event number) after the one before."""
    await conn.execute(_SEED, application_id, start, end, now, due_at, apart_s)


async def _vacuum(conn: Connection) -> None:
    for table in (
        "webhook_deliveries",
        "outbox_events",
        "checkout_sessions",
        "webhook_configs",
        "applications",
    ):
        await conn.execute(f"VACUUM ANALYZE {table}")


class _Rollback(Exception):
    def __init__(self, found: Any) -> None:
        self.found = found


async def _rolled_back(db: Database, unit: Callable[[Connection], Awaitable[Any]]) -> Any:
    async def run(conn: Connection) -> None:
        raise _Rollback(await unit(conn))

    try:
        await db.transaction(run)
    except _Rollback as done:
        return done.found
    raise AssertionError("not rolled back")


async def _claim(conn: Connection, statements: Statements) -> list[Any]:
    """One claim by `statements`, as `claim_due_deliveries` makes it (the loop's free slots, nothing
    in flight): the rows it claimed, each with its application."""
    endpoints_sql, deliveries_sql = statements
    now = SYSTEM_CLOCK.now()
    endpoints = await conn.fetch(endpoints_sql, *_endpoint_args(endpoints_sql, now))
    await _lock_merchants(conn, endpoints)
    return list(await conn.fetch(deliveries_sql, *_delivery_args(endpoints, now, deliveries_sql)))


async def _explained(conn: Connection, statements: Statements) -> list[str]:
    """The plans of one claim's two statements as they ran (the claim is made: roll it back)."""
    endpoints_sql, deliveries_sql = statements
    now = SYSTEM_CLOCK.now()
    args = _endpoint_args(endpoints_sql, now)
    plans = [await _explain(conn, endpoints_sql, args)]
    endpoints = await conn.fetch(endpoints_sql, *args)
    await _lock_merchants(conn, endpoints)
    plans.append(await _explain(conn, deliveries_sql, _delivery_args(endpoints, now, deliveries_sql)))
    return plans


async def _lock_merchants(conn: Connection, endpoints: list[Any]) -> None:
    await conn.execute(
        "SELECT pg_try_advisory_xact_lock($2, hashtext(m::text)) FROM unnest($1::uuid[]) AS m",
        sorted({row["merchant_id"] for row in endpoints}),
        MERCHANT_CLAIM_LOCK,
    )


# Today's statements also take each merchant's allowance of attempts this round: none given, so
# every merchant's is its share.
_NO_ALLOWANCES: tuple[Any, ...] = ([], [], IN_FLIGHT_PER_MERCHANT)


def _endpoint_args(endpoints_sql: str, now: datetime) -> tuple[Any, ...]:
    args = (DELIVERY_SLOTS, IN_FLIGHT_PER_ENDPOINT, IN_FLIGHT_PER_MERCHANT, now)
    return (*args, *_NO_ALLOWANCES) if endpoints_sql is CLAIM_ENDPOINTS else args


def _delivery_args(endpoints: list[Any], now: datetime, deliveries_sql: str) -> tuple[Any, ...]:
    ids = [row["id"] for row in endpoints]
    args = (ids, IN_FLIGHT_PER_ENDPOINT, DELIVERY_SLOTS, LEASE_S, IN_FLIGHT_PER_MERCHANT, None, now)
    return (*args, *_NO_ALLOWANCES) if deliveries_sql is CLAIM_DELIVERIES else args


async def _explain(conn: Connection, statement: str, args: tuple[Any, ...]) -> str:
    rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", *args)
    return "\n".join(row[0] for row in rows)


async def _times_ms(db: Database, claim: Callable[[Connection], Awaitable[Any]]) -> list[float]:
    """How long whole claims take, each in a transaction rolled back; the first three not counted."""
    samples = []
    for number in range(3 + CLAIMS):

        async def timed(conn: Connection) -> float:
            started = time.perf_counter()
            await claim(conn)
            return (time.perf_counter() - started) * 1000

        elapsed = await _rolled_back(db, timed)
        if number >= 3:
            samples.append(elapsed)
    return samples


async def _claim_now(conn: Connection) -> list[uuid.UUID]:
    """A claim as payorch makes it now: the application of each delivery claimed."""
    claimed = await claim_due_deliveries(
        conn,
        limit=DELIVERY_SLOTS,
        per_endpoint=IN_FLIGHT_PER_ENDPOINT,
        per_merchant=IN_FLIGHT_PER_MERCHANT,
        lease_s=LEASE_S,
        owner=None,
        now=SYSTEM_CLOCK.now(),
    )
    return [delivery.application_id for delivery in claimed]


async def _claim_before(conn: Connection) -> list[uuid.UUID]:
    """A claim as payorch made it before 0021: the application of each delivery claimed."""
    return [row["application_id"] for row in await _claim(conn, BEFORE)]


async def _execute(conn: Connection, sql: str) -> None:
    await conn.execute(sql)


async def report(db: Database, names: dict[uuid.UUID, str], deliveries: int) -> None:
    runs = (("before 0021", UNDO_0021, BEFORE, _claim_before), ("after 0021", REDO_0021, AFTER, _claim_now))
    for label, schema, statements, claim in runs:
        progress(f"claim_explain: the claim {label}")
        await db.autocommit(_execute, schema)
        plans = await _rolled_back(db, partial(_explained, statements=statements))
        claimed = await _rolled_back(db, claim)
        per_merchant: dict[str, int] = {}
        for application_id in claimed:
            per_merchant[names[application_id]] = per_merchant.get(names[application_id], 0) + 1
        print(
            f"== The claim {label}: A has {deliveries:,} deliveries due over {ENDPOINTS} endpoints, "
            f"{QUIET} quiet merchants one each =="
        )
        for title, plan in zip(("endpoints", "deliveries"), plans, strict=True):
            print(f"-- {title} --\n{plan}\n")
        print(f"claimed per merchant: {dict(sorted(per_merchant.items()))}")
        samples = await _times_ms(db, claim)
        print(
            f"whole claim ({CLAIMS} claims, each rolled back): p50 {statistics.median(samples):.1f} ms, "
            f"max {max(samples):.1f} ms\n",
            flush=True,
        )


async def main(deliveries: int) -> None:
    with tempfile.TemporaryDirectory(prefix="payorch-claim-explain-") as work_dir:
        progress("claim_explain: starting an embedded PostgreSQL")
        dsn = await start_embedded_postgres(Path(work_dir) / "pgdata")
        async with open_database(dsn, min_size=1, max_size=2) as db:
            await migrate(db)
            names = await seed(db, deliveries)
            await report(db, names, deliveries)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=DELIVERIES)
    trio.run(main, parser.parse_args().deliveries)
