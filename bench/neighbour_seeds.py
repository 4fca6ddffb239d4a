"""What the neighbours scenario (`bench/neighbours.py`) writes straight into payorch's database, as
`bench.floods.seed_sessions` does: a merchant's past sessions with the outcomes routing learned from
them (what a backtest replays), and a merchant's backlog of webhook deliveries (what the delivery
loop drains); and what it reads back: how far a backlog drained, when each event committed.
"""

from __future__ import annotations

import uuid

from bench.webhooks import EVENT_TYPE
from payorch.storage.database import Connection

# Settled sessions, one a second back from the newest (so 100,000 span about 28 hours, inside a
# backtest's default 30 days), by card through the sandbox: PLN, one in four EUR; one in five
# declined; billing countries PL, one in seven DE; amounts from 10.00 to 255.00.
_PAST_SESSIONS = """
    INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency, status,
        failure_reason, provider_name, payment_method, customer, created_at, updated_at)
    SELECT gen_random_uuid(), $1, 'bench-past-' || g, 1000 + (g % 50) * 500,
        CASE WHEN g % 4 = 0 THEN 'EUR' ELSE 'PLN' END,
        CASE WHEN g % 5 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
        CASE WHEN g % 5 = 0 THEN 'PAYMENT_FAILED' END,
        'sandbox', 'card',
        jsonb_build_object('email', 'buyer@example.com', 'firstName', 'Jan', 'lastName', 'Kowalski',
            'billingAddress', jsonb_build_object('line1', '1 Market Street', 'city', 'Warsaw',
                'postalCode', '00-001', 'country', CASE WHEN g % 7 = 0 THEN 'DE' ELSE 'PL' END)),
        now() - g * interval '1 second', now() - g * interval '1 second'
    FROM generate_series(1, $2) AS g"""

# Each of those sessions' outcome at the sandbox, as `engine.payments.events` records it.
_PAST_OUTCOMES = """
    INSERT INTO routing_outcomes (application_id, provider_name, payment_method, currency, outcome,
        session_id, recorded_at, session_created_at)
    SELECT application_id, provider_name, payment_method, currency,
        CASE WHEN status = 'SUCCEEDED' THEN 's' ELSE 'f' END, id, created_at, created_at
    FROM checkout_sessions WHERE application_id = $1 ORDER BY created_at"""

# `$2` sessions of the application, each with its `session.completed` event, already fanned out,
# and one delivery of each event to every endpoint of the application, due now: what the delivery
# loop finds after the fan-out of a burst of sessions' events. Each event is a session's of its own
# (as real events are: `session_id` set on the event and its deliveries), so the claim checks each
# delivery against its session's earlier ones as it does for real deliveries; events without a
# session (as this seed wrote before) skipped that check and were no backlog payorch can have.
_BACKLOG = """
    WITH numbered AS (SELECT g, gen_random_uuid() AS session_id FROM generate_series(1, $2) AS g),
    sessions AS (
        INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
            status, provider_name, payment_method, customer)
        SELECT session_id, $1::uuid, 'bench-backlog-' || g, 10000, 'PLN', 'SUCCEEDED', 'sandbox', 'card',
            '{}'::jsonb
        FROM numbered),
    events AS (
        INSERT INTO outbox_events (id, application_id, session_id, type, payload, fanned_out_at)
        SELECT 'evt_bench_backlog_' || replace($1::uuid::text, '-', '') || '_' || g, $1::uuid, session_id,
            $3::text,
            jsonb_build_object('id', 'evt_bench_backlog_' || g, 'type', $3::text,
                'createdAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                'applicationId', $1::uuid::text,
                'data', jsonb_build_object('sessionId', session_id::text, 'status', 'SUCCEEDED',
                    'orderReference', 'bench-backlog-' || g, 'currency', 'PLN',
                    'amount', jsonb_build_object('total', '100.00', 'shipping', '0.00', 'tax', '0.00'))),
            now()
        FROM numbered ORDER BY g
        RETURNING seq, session_id)
    INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id, status,
        next_attempt_at)
    SELECT gen_random_uuid(), c.id, $1::uuid, e.seq, e.session_id, 'PENDING', now()
    FROM events e CROSS JOIN webhook_configs c
    WHERE c.application_id = $1::uuid AND c.is_active AND c.deleted_at IS NULL"""


async def seed_past_sessions(conn: Connection, application_id: uuid.UUID, count: int) -> None:
    """`count` settled sessions of the application through the sandbox, each with its outcome."""
    await conn.execute(_PAST_SESSIONS, application_id, count)
    await conn.execute(_PAST_OUTCOMES, application_id)


async def seed_backlog(conn: Connection, application_id: uuid.UUID, events: int) -> None:
    """`events` sessions of the application, each with one event, each event with a delivery to
    every one of its endpoints pending and due now."""
    await conn.execute(_BACKLOG, application_id, events, EVENT_TYPE)


async def analysed_at(conn: Connection) -> float:
    """When `webhook_deliveries` was last analysed, by payorch or autovacuum (epoch seconds, 0 if
    never)."""
    seconds = await conn.fetchval(
        """SELECT extract(epoch FROM greatest(last_analyze, last_autoanalyze))
           FROM pg_stat_user_tables WHERE relname = 'webhook_deliveries'"""
    )
    return float(seconds or 0)


async def backlog_state(conn: Connection, application_ids: list[uuid.UUID]) -> tuple[int, int]:
    """The applications' deliveries delivered and still pending, now."""
    row = await conn.fetchrow(
        """SELECT count(*) FILTER (WHERE status = 'DELIVERED') AS delivered,
                  count(*) FILTER (WHERE status = 'PENDING') AS pending
           FROM webhook_deliveries WHERE application_id = ANY($1::uuid[])""",
        application_ids,
    )
    assert row is not None
    return int(row["delivered"]), int(row["pending"])


async def end_backlog(conn: Connection, application_ids: list[uuid.UUID]) -> None:
    """Give up the applications' pending deliveries, as a deleted endpoint's are: the backlog stops
    loading payorch for what is measured after it."""
    await conn.execute(
        """UPDATE webhook_deliveries SET status = 'FAILED', next_attempt_at = NULL,
               last_error = 'bench: backlog ended'
           WHERE application_id = ANY($1::uuid[]) AND status = 'PENDING'""",
        application_ids,
    )


async def clear_commit_times(conn: Connection) -> None:
    """Forget the commit times noted so far (`bench.webhooks.install_commit_clock`)."""
    await conn.execute("DELETE FROM bench_event_commits")


async def commit_times_of(conn: Connection, application_id: uuid.UUID) -> dict[str, float]:
    """Unix time at which each webhook event of the application noted since the last clear
    committed, by event id."""
    rows = await conn.fetch(
        """SELECT c.event_id, extract(epoch FROM c.committed_at)::float8 AS at
           FROM bench_event_commits c JOIN outbox_events e ON e.id = c.event_id
           WHERE e.application_id = $1 AND e.type = $2""",
        application_id,
        EVENT_TYPE,
    )
    return {row["event_id"]: row["at"] for row in rows}
